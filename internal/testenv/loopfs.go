package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Unavailable stops a test that cannot run here: it skips with a loud
// message saying why, or fails under WEIR_REQUIRE_SERVICES=1, so that a
// missing service or tool never turns into a silently green run.
func Unavailable(t testing.TB, why string) {
	t.Helper()
	if Required() {
		t.Fatalf("%s (%s=1: a missing service or tool is a failure)", why, RequireEnv)
	}
	t.Skipf("\n*** SKIPPING: %s\n*** set %s=1 to make this a failure", why, RequireEnv)
}

// LoopExt4 makes a fresh ext4 file system of size bytes on a loop device
// (no blocks reserved for root) and mounts it under a temporary directory
// for the test's duration; the mount point is returned. It needs root,
// losetup, mkfs.ext4, mount and umount: without them the test is
// Unavailable. Cleanups the test registers afterwards (a daemon's kill)
// run before the unmount.
func LoopExt4(t testing.TB, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, "a loop-device ext4 file system needs root (losetup, mount)")
	}
	for _, tool := range []string{"losetup", "mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			Unavailable(t, "a loop-device ext4 file system needs "+tool+": "+err.Error())
		}
	}
	run := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			Unavailable(t, name+" "+strings.Join(args, " ")+": "+err.Error()+": "+strings.TrimSpace(string(out)))
		}
		return strings.TrimSpace(string(out))
	}
	tmp := t.TempDir()
	img, mnt := filepath.Join(tmp, "ext4.img"), filepath.Join(tmp, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(img)
	if err == nil {
		err = f.Truncate(size)
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	run("mkfs.ext4", "-q", "-F", "-m", "0", img)
	dev := run("losetup", "--find", "--show", img)
	t.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })
	run("mount", dev, mnt)
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
			exec.Command("umount", "-l", mnt).Run()
		}
	})
	return mnt
}

// FreeBytes is what an unprivileged writer may still allocate on the file
// system under dir.
func FreeBytes(t testing.TB, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// FillTo writes a ballast file, dir/ballast, until the file system under
// dir has about free bytes left; removing the file gives the space back.
func FillTo(t testing.TB, dir string, free int64) {
	t.Helper()
	avail := FreeBytes(t, dir)
	if avail <= free {
		t.Fatalf("only %d bytes free, want more than %d", avail, free)
	}
	f, err := os.Create(filepath.Join(dir, "ballast"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for left := avail - free; left > 0; left -= int64(len(chunk)) {
		if _, err := f.Write(chunk[:min(int64(len(chunk)), left)]); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d bytes free after the ballast", FreeBytes(t, dir))
}
