package kafka

import (
	"encoding/binary"
	"fmt"
)

// Allocation guard. kmsg allocates an array as soon as it reads its length,
// checking only that as many bytes remain; a 100 MiB produce claiming 100M
// topics would make it allocate gigabytes of structs before failing. So,
// before kmsg decodes a request, checkShape walks it — lengths, counts and
// tagged fields only, building nothing — and rejects any length that the
// bytes present do not back, and requests with more than maxElements array
// elements in total. kmsg then decodes the same bytes (the codec stays
// kmsg's; this is only a bounds check over the same grammar).

// maxElements bounds the array elements of one request (topics, partitions,
// ...). VDL topics have one partition; real clients stay far below this.
const maxElements = 1 << 17

type shapeReader struct {
	b     []byte
	flex  bool
	elems int
	bad   bool
}

func (r *shapeReader) skip(n int) {
	if r.bad || n < 0 || n > len(r.b) {
		r.fail()
		return
	}
	r.b = r.b[n:]
}

func (r *shapeReader) fail() { r.bad = true; r.b = nil }

func (r *shapeReader) i8()  { r.skip(1) }
func (r *shapeReader) i16() { r.skip(2) }
func (r *shapeReader) i32() { r.skip(4) }
func (r *shapeReader) i64() { r.skip(8) }

func (r *shapeReader) int16v() int16 {
	if r.bad || len(r.b) < 2 {
		r.fail()
		return 0
	}
	v := int16(binary.BigEndian.Uint16(r.b))
	r.b = r.b[2:]
	return v
}

func (r *shapeReader) int32v() int32 {
	if r.bad || len(r.b) < 4 {
		r.fail()
		return 0
	}
	v := int32(binary.BigEndian.Uint32(r.b))
	r.b = r.b[4:]
	return v
}

func (r *shapeReader) uvarint() uint64 {
	if r.bad {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

// compactLen reads a compact length (uvarint of length+1); -1 is null.
func (r *shapeReader) compactLen() int {
	v := r.uvarint()
	if v > uint64(len(r.b))+1 {
		r.fail()
		return 0
	}
	return int(v) - 1
}

func (r *shapeReader) str(nullable bool) {
	var n int
	if r.flex {
		n = r.compactLen()
	} else {
		n = int(r.int16v())
	}
	if n == -1 && nullable {
		return
	}
	r.skip(n)
}

func (r *shapeReader) bytes(nullable bool) {
	var n int
	if r.flex {
		n = r.compactLen()
	} else {
		n = int(r.int32v())
	}
	if n == -1 && nullable {
		return
	}
	r.skip(n)
}

func (r *shapeReader) array(nullable bool, each func()) {
	var n int
	if r.flex {
		n = r.compactLen()
	} else {
		n = int(r.int32v())
	}
	if r.bad {
		return
	}
	if n == -1 && nullable {
		return
	}
	if n < 0 || n > len(r.b) {
		r.fail()
		return
	}
	if r.elems += n; r.elems > maxElements {
		r.fail()
		return
	}
	for i := 0; i < n && !r.bad; i++ {
		each()
	}
}

// tags skips a tagged-field section (flexible versions only).
func (r *shapeReader) tags() {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail()
		return
	}
	for i := uint64(0); i < n && !r.bad; i++ {
		r.uvarint() // tag
		size := r.uvarint()
		if size > uint64(len(r.b)) {
			r.fail()
			return
		}
		r.skip(int(size))
	}
}

func (r *shapeReader) endStruct() {
	if r.flex {
		r.tags()
	}
}

// checkShape walks a request body of a served key and version with the
// API's shape (registered in its file). It knows the versions the
// profiles advertise; anything else is refused.
func checkShape(key, v int16, flex bool, body []byte) error {
	a, ok := apiByKey[key]
	if !ok {
		return fmt.Errorf("%w: no shape for key %d", ErrBadFrame, key)
	}
	if v > a.shapeMax {
		return fmt.Errorf("%w: %s v%d shape unknown", ErrBadFrame, a.key.Name(), v)
	}
	r := &shapeReader{b: body, flex: flex}
	a.shape(r, v)
	if r.bad {
		return fmt.Errorf("%w: key %d v%d: a length or count overruns the request (or more than %d elements)", ErrBadFrame, key, v, maxElements)
	}
	return nil
}
