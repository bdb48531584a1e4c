// weir status page: refreshes the figures from status.json every second,
// without reloading. The first paint is the server's; this only keeps
// it current. The formats are render.go's (format), figure for figure.
"use strict";
(function () {
	const DASH = "\u2013";
	const REFRESH_MS = 1000;
	const units = ["B", "KiB", "MiB", "GiB", "TiB"];
	const pad2 = (n) => String(n).padStart(2, "0");
	const known = (v) => typeof v === "number" && v >= 0 && !Number.isNaN(v);
	function bytes(v) {
		let i = 0;
		while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
		return i === 0 ? v.toFixed(0) + " B" : v.toFixed(1) + " " + units[i];
	}
	function age(v) {
		if (!known(v)) return DASH;
		const s = Math.floor(v);
		if (s < 60) return s + "s";
		if (s < 3600) return Math.floor(s / 60) + "m " + pad2(s % 60) + "s";
		if (s < 86400) return Math.floor(s / 3600) + "h " + pad2(Math.floor(s % 3600 / 60)) + "m";
		return Math.floor(s / 86400) + "d " + pad2(Math.floor(s % 86400 / 3600)) + "h";
	}
	const fmt = {
		text: (v) => (v === undefined || v === null || v === "" ? DASH : String(v)),
		yesno: (v) => (v === true ? "yes" : "no"),
		clock: (v) => { const d = new Date(v); return Number.isNaN(d.getTime()) ? DASH : d.toISOString().slice(11, 19) + "Z"; },
		num: (v) => (typeof v === "number" ? String(v) : DASH),
		count: (v) => (known(v) ? String(v) : DASH),
		bytes: (v) => (typeof v === "number" ? bytes(v) : DASH),
		rate: (v) => {
			if (!known(v)) return DASH;
			if (v === 0) return "0/s";
			return (v < 10 ? v.toFixed(2) : v < 100 ? v.toFixed(1) : v.toFixed(0)) + "/s";
		},
		byterate: (v) => (known(v) ? bytes(v) + "/s" : DASH),
		secs: (v) => {
			if (!known(v)) return DASH;
			if (v < 1e-3) return (v * 1e6).toFixed(0) + " \u00b5s";
			if (v < 1) return (v * 1e3).toFixed(1) + " ms";
			return v.toFixed(2) + " s";
		},
		age: age,
		pct: (v) => (known(v) ? (100 * v).toFixed(1) + "%" : DASH),
	};
	function get(o, path) {
		for (const k of path.split(".")) {
			if (o === null || o === undefined) return undefined;
			o = o[k];
		}
		return o;
	}
	function setLevel(el, level) {
		for (const c of Array.from(el.classList)) if (c.startsWith("lvl-")) el.classList.remove(c);
		if (level) el.classList.add("lvl-" + level);
	}
	// fill sets every data-k element under root (not inside a list) from data.
	function fill(root, data, inList) {
		const els = Array.from(root.querySelectorAll("[data-k]"));
		if (root.dataset && root.dataset.k) els.push(root);
		for (const el of els) {
			if (!inList && el.closest("[data-list]")) continue;
			const f = fmt[el.dataset.f] || fmt.text;
			const s = f(get(data, el.dataset.k));
			if (el.textContent !== s) el.textContent = s;
		}
	}
	function lists(data) {
		for (const list of document.querySelectorAll("[data-list]")) {
			const key = list.dataset.list;
			const items = get(data, key) || [];
			const tpl = document.getElementById("tpl-" + key);
			if (!tpl) continue;
			const frag = document.createDocumentFragment();
			for (const item of items) {
				const row = tpl.content.firstElementChild.cloneNode(true);
				fill(row, item, true);
				setLevel(row, item.level);
				frag.appendChild(row);
			}
			if (items.length === 0) {
				const proto = tpl.content.firstElementChild;
				const row = document.createElement(proto.tagName);
				row.className = "empty";
				if (proto.tagName === "TR") {
					const td = document.createElement("td");
					td.colSpan = proto.children.length;
					td.textContent = list.dataset.empty || "none";
					row.appendChild(td);
				} else {
					row.textContent = list.dataset.empty || "none";
				}
				frag.appendChild(row);
			}
			list.replaceChildren(frag);
		}
	}
	const SVG = "http://www.w3.org/2000/svg";
	function timeline(t) {
		const svg = document.getElementById("timeline");
		if (!svg || !t) return;
		svg.setAttribute("viewBox", -t.span_seconds + " 0 " + t.span_seconds + " 100");
		const nodes = [];
		for (const r of t.runs || []) {
			const rect = document.createElementNS(SVG, "rect");
			rect.setAttribute("class", "st-" + r.state);
			rect.setAttribute("x", r.from);
			rect.setAttribute("y", 0);
			rect.setAttribute("width", r.to - r.from);
			rect.setAttribute("height", 100);
			nodes.push(rect);
		}
		const line = document.createElementNS(SVG, "polyline");
		line.setAttribute("class", "budget");
		line.setAttribute("points", (t.budget || []).map((p) => p[0] + "," + Math.round(1000 * (100 - 100 * Math.min(Math.max(p[1], 0), 1))) / 1000).join(" "));
		nodes.push(line);
		svg.replaceChildren(...nodes);
	}
	function apply(data) {
		fill(document, data, false);
		for (const el of document.querySelectorAll("[data-level]")) setLevel(el, get(data, el.dataset.level));
		for (const el of document.querySelectorAll("[data-show]")) el.hidden = get(data, el.dataset.show) !== true;
		for (const el of document.querySelectorAll("[data-show-not]")) el.hidden = get(data, el.dataset.showNot) === true;
		lists(data);
		timeline(data.timeline);
	}
	let refreshes = 0;
	function status(text, stale) {
		const el = document.getElementById("refresh");
		if (el) el.textContent = text;
		document.body.classList.toggle("stale", stale);
	}
	async function refresh() {
		try {
			const resp = await fetch("status.json", { cache: "no-store", credentials: "same-origin" });
			if (!resp.ok) throw new Error("status.json answered " + resp.status);
			apply(await resp.json());
			refreshes++;
			document.body.dataset.refreshes = String(refreshes);
			status("live: refreshed every second", false);
		} catch (e) {
			status("NOT refreshing (" + e.message + "); retrying", true);
		}
		setTimeout(refresh, REFRESH_MS);
	}
	window.weirStatus = { fmt: fmt, apply: apply };
	refresh();
})();
