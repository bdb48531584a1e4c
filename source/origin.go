package source

import (
	"errors"

	"github.com/weir-io/weir/sink"
)

// originVersion starts every encoded Origin.
const originVersion = 1

// MaxSourceName bounds Origin.Source.
const MaxSourceName = 255

// Origin is what the gate keeps of a source record besides its payload: its
// id and its source's name. In the write-ahead buffer it is the record's
// Meta:
//
//	u8  version (1)
//	[16]byte id
//	u8  length of the source name
//	source name
type Origin struct {
	ID     sink.RecordID
	Source string
}

// ErrBadOrigin is returned by DecodeOrigin for bytes that are not an Origin.
var ErrBadOrigin = errors.New("source: not an encoded origin")

// EncodeOrigin encodes o, truncating the name to MaxSourceName bytes.
func EncodeOrigin(o Origin) []byte {
	name := o.Source
	if len(name) > MaxSourceName {
		name = name[:MaxSourceName]
	}
	b := make([]byte, 0, 18+len(name))
	b = append(b, originVersion)
	b = append(b, o.ID[:]...)
	b = append(b, byte(len(name)))
	return append(b, name...)
}

// DecodeOrigin decodes what EncodeOrigin produced.
func DecodeOrigin(b []byte) (Origin, error) {
	if len(b) < 18 || b[0] != originVersion || int(b[17]) != len(b)-18 {
		return Origin{}, ErrBadOrigin
	}
	var o Origin
	copy(o.ID[:], b[1:17])
	o.Source = string(b[18:])
	return o, nil
}
