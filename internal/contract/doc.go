// Package contract judges records against a stream's data contract: what
// the data on a stream promises (a Spec, from the [[contract]] config
// section) compiled once into a Contract, then checked record by record.
//
// # Compiling
//
// Compile refuses a spec it cannot honour, with an error naming the
// stream and the field at fault (`contract for stream "orders": rule
// "positive_amount": ERROR: <input>:1:8: ...`):
//
//   - the JSON Schema must compile, in draft 2019-09 or 2020-12 (2020-12
//     when the document has no $schema; other drafts are refused). It is
//     one self-contained document: a $ref outside it, remote or a file,
//     is refused (put shared parts under $defs) — compiling never touches
//     the network or the disk. Format assertions ("format": "date-time")
//     are on;
//   - every rule must have a name, unique, other than "decode" and
//     "schema" (the names of the built-in checks), and an expression that
//     type-checks to bool;
//   - the natural key and event time must be RFC 6901 JSON pointers, and
//     Unique needs a natural key.
//
// # Checking
//
// Check runs, in order, stopping at the first failure:
//
//  1. decode: the payload must be exactly one JSON value (white space
//     around it allowed). Else Code CodeDecode, Rule "decode".
//  2. schema, when the spec has one. Else Code CodeContract, Rule
//     "schema", and Error the failing keyword's location in the schema,
//     the validator's message and the instance location, e.g.
//     "/properties/amount/type: got string, want number (at /amount)",
//     followed by " and N more" when other keywords failed too.
//  3. rules, in the spec's order. A fail rule that evaluates false, or
//     fails to evaluate (a missing field: "no such key: discount"),
//     rejects the record: Code CodeDQ, Rule the rule's name, Error
//     "<expr> is false" or CEL's error. A warn rule that does either is
//     listed in Warned and the record goes on. Rules after a rejecting
//     fail rule are not run.
//  4. the dedup key of a record that passed (below).
//
// The payload is decoded once; the schema validator and the rules read
// the same value.
//
// # Rules
//
// Rules are CEL expressions (cel.dev/cel-go, standard library) over:
//
//	record   dyn                  the decoded payload
//	key      string               the record's key ("" when it has none)
//	headers  map(string, string)  its headers; of a repeated name, the last value
//	source   string               the source's name ("socket" for producers)
//
// JSON numbers written without fraction or exponent that fit int64 are
// CEL ints, other numbers doubles; comparisons work across the two
// (record.amount > 0 holds for 5 and for 5.5, record.n == 5 for 5.0),
// arithmetic does not (record.n + 1.5 is an error when n is 5: write
// double(record.n) + 1.5). Reading a field the record lacks is an
// error, so a rule over an optional field guards it with has(). An
// expression whose type is dyn (record.active) is refused at compile
// time: compare it (record.active == true).
//
// # Dedup key
//
// When DedupKeyed (a natural key declared Unique, or PayloadUnique),
// Check sets Result.Key on a record that passed. With a unique natural
// key, Key is a JSON array of the values at the natural key's pointers,
// in order, then the value at the event-time pointer when declared, each
// in a canonical form: no insignificant white space, object members
// sorted by name, strings escaped one way only (only '"', '\\' and
// control characters, as \u00XX), and numbers normalised — integers
// exactly as written ("-0" as "0"), any other number by its float64
// value: an integral one as that integer ("1.0", "1e0" and "1" are the
// same key), the rest in shortest round-trip form ("0.50" as "0.5").
// Numbers are therefore told apart exactly when they are integers and to
// float64 precision otherwise. A pointer that resolves to nothing — or to
// null — leaves Key nil: the record passes but cannot be deduped. With
// only PayloadUnique, Key is the payload itself (it aliases the record's
// Payload).
//
// # Header narrowing
//
// A spec with Header applies only to the records whose header of that
// name has the value HeaderValue (Matches; the last value when the name
// repeats); the caller picks the contract and then calls Check.
//
// # Concurrency and cost
//
// A Contract is immutable: Check is safe for concurrent use without
// locks, and Compile does all the expensive work once (schema
// compilation, CEL parsing, checking and planning). Check allocates per
// record the decoded value and, when the library validator runs, its
// working state; the CEL activation, when cel-go runs, comes from a
// pool. Nothing is retained after Check returns except the Result. Its
// cost on a ~256-byte order record, and its split between decoding, the
// schema and five rules, is measured by
//
//	go test -run '^$' -bench Check -count 5 ./internal/contract
//
// and the five rules alone by -bench EvalRules.
//
// The library schema validator was the largest cost (it compares every
// number through math/big and allocates per object). A schema written
// with the common keywords is also compiled into a fast path
// (fastschema.go) that accepts a record the library would accept without
// asking it; anything the fast path does not accept — invalid, or a case
// it leaves to the library — is judged by the library, which also writes
// the message, so verdicts and errors are the library's.
// FuzzFastSchemaAgrees checks the one property that makes this safe:
// what the fast path accepts, the library accepts.
//
// The rules have a fast path too (fastrules.go, fastvalues.go). cel-go
// converts every member a rule reads to a CEL value, on every record. A
// rule whose checked expression is built from the common shapes — record
// members, source, constants, the six comparisons, has(), in, size(),
// &&, ||, !, all() and exists() over a list, startsWith, endsWith,
// contains and matches with a constant — is also compiled into a tree
// evaluated over the decoded value, with CEL's semantics: numbers
// compared across int, uint and double as cel-go does (a double against
// an int in float64), a JSON number read as cel-go reads it (an int when
// it is one, else a double), size() of a string in code points. The tree
// answers true, false or unsure: unsure wherever cel-go would raise an
// error or meet a value the tree does not handle (a missing member, an
// ordering across types, a number beyond float64), except that false &&
// x is false and true || x is true whatever x, as in CEL. A true or
// false answer is the rule's verdict ("<expr> is false" when false, as
// cel-go's would be); an unsure one hands the record to cel-go, which
// decides and words any error, so verdicts and messages stay cel-go's.
// The property that makes this safe — a definite answer is the bool
// cel-go evaluates, without an error — is checked by FuzzFastRulesAgree
// against cel-go over a table of rule shapes, and by
// TestFastNumbersAgree on the numeric edges (2^53, 2^63, NaN,
// infinities, -0).
//
// Decoding is a purpose-built parser that matches encoding/json's
// results (FuzzDecode) with fewer allocations.
package contract
