// Package arrowrec is the one place the mapping between Arrow and weir
// records is defined, both ways: a row of an Arrow record batch becomes
// one weir record (Decoder, for the Flight and Arrow IPC sources), and a
// record's JSON payload becomes a row of typed columns again (Builder,
// for a columnar sink), or any record a row of GenericSchema
// (AppendGeneric).
//
// # Rows are records
//
// Each row of a batch is one record, so ids, contracts, deduplication,
// quarantine, coverage and recovery treat it as any other record. Its
// payload is the row as a JSON object: one member per column, in the
// schema's order, named as the column is, valued by the table below.
//
// The columns named in Columns also become the record's key, event time
// and headers, and stay in the payload too, so the payload alone rebuilds
// the row. A key or header column's value is taken as it is when it is a
// string or binary, else as its JSON text (42 → "42"); a null key is no
// key, a null header column is no header. The event-time column must be
// a timestamp (any unit, any zone), date32 or date64; a null is no event
// time.
//
// # The table
//
//	Arrow type                          JSON
//	null, or a null value of any type   null
//	bool                                true / false
//	int8 … int64, uint8 … uint64        a number, every digit exact (readers that hold
//	                                    numbers as doubles lose digits past 2⁵³)
//	float16, float32, float64           the shortest number that reads back as the same
//	                                    value at the column's width (0.1, 1e+21, -0);
//	                                    NaN → "NaN", +Inf → "Infinity", -Inf → "-Infinity"
//	                                    (strings: JSON has no number for them)
//	utf8, large utf8, utf8 view         a string (invalid UTF-8 → U+FFFD)
//	binary, large binary, binary view,  a string: standard base64 with padding
//	fixed-size binary
//	date32                              "2024-03-01"
//	date64                              "2024-03-01"; a value that is not a whole day
//	                                    (the spec forbids it) → RFC 3339 in ms, UTC
//	time32[s|ms], time64[us|ns]         "13:04:05", "13:04:05.123", ".123456", ".123456789":
//	                                    the unit's digits, always all of them
//	timestamp[unit]                     RFC 3339 with the unit's digits, always all of them:
//	                                    s "2024-03-01T13:04:05Z", ms "…05.123Z",
//	                                    us "…05.123456Z", ns "…05.123456789Z". Without a
//	                                    time zone the value is taken as UTC ("Z")
//	timestamp[unit, tz]                 the same instant written in tz, with its offset
//	                                    ("2024-03-01T14:04:05.123+01:00" for
//	                                    Europe/Paris); "UTC" writes "Z"; a zone this
//	                                    host's time zone database lacks, or an offset
//	                                    of the zone that is not whole minutes (local
//	                                    mean time, before ~1900), writes UTC
//	duration[unit]                      a number: the count of the unit (the unit is the
//	                                    schema's)
//	decimal32/64/128/256(p, s)          a string, exact, with s digits after the point
//	                                    ("-12.50" for decimal128(10, 2))
//	list, large list, fixed-size list   an array
//	struct                              an object, a member per field in field order
//	map<k, v>                           an object, a member per entry in entry order
//	                                    (duplicate keys stay duplicate members). A key
//	                                    whose JSON is a string (utf8, binary, dates,
//	                                    times, decimals) is that string; any other key is
//	                                    its JSON text: 1 → "1", true → "true"
//	dictionary<i, v>                    the decoded value, as v
//
// Refused, with an error wrapping ErrUnsupported when the schema is first
// seen (NewDecoder, NewBuilder, CheckSchema): sparse and dense unions,
// intervals, list views, run-end encoded and extension types, and a
// schema or struct with two fields of one name (they would be one JSON
// member). A date or time RFC 3339 cannot write (a year before 0000 or
// past 9999, a time of day outside the day) fails the batch it is in.
//
// # The inverse
//
// Builder.Append reads each column's member back by the same table: a
// missing or null member is a null (an error for a column that is not
// nullable), members the schema does not name are ignored, integers and
// decimals also accept a string holding the number, a timestamp also an
// integer count of its unit, a date64 also RFC 3339. Digits finer than a
// time or timestamp column's unit are an error rather than silently
// dropped. A row that fails leaves the batch as it was. For any payload
// the Decoder wrote, Append rebuilds the row's values exactly (a
// dictionary column is rebuilt as a dictionary of the values seen).
//
// # The schema
//
// The schema a row came in is kept with it: every row carries the header
// HeaderSchema, the SHA-256 (hex) of the schema serialized as an Arrow
// IPC stream with no batches; the first row of each batch also carries
// HeaderSchemaIPC, that serialization itself, which SchemaFromIPC reads
// back. A columnar sink keeps the schemas it has seen by fingerprint
// (Schemas); the Flight source also describes each stream's schema in
// its FlightInfo.
//
// # Record ids
//
// Ids are the sources' business, made with source.TimedID at the
// event-time column's value (ms 0 without one) over the row's place:
// (stream, producer, batch sequence, row index) for a Flight stream,
// (file identity, batch index, row index) for a file. See the sources'
// package docs.
package arrowrec
