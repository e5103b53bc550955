package kafka

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Frame errors. Each one closes the connection.
var (
	ErrFrameTooLarge = errors.New("kafka: request frame too large")
	ErrBadFrame      = errors.New("kafka: malformed request frame")
	ErrUnknownAPI    = errors.New("kafka: unknown API key")
)

// minFrame is the smallest request: key, version, correlation id and a
// client id length.
const minFrame = 2 + 2 + 4 + 2

// ReadFrame reads one request frame: an int32 length, then that many bytes
// (returned without the length). The length is checked against maxBytes
// first, and the buffer grows as the bytes arrive (never to the announced
// length up front: a client announcing 100 MiB and sending nothing costs
// frameChunk). A clean EOF before the length returns io.EOF.
func ReadFrame(r io.Reader, maxBytes int) ([]byte, error) {
	return readFrame(r, func() int { return maxBytes }, nil, nil)
}

// frameChunk is a frame buffer's first size; it then grows frameGrowth
// times as the bytes arrive, so a frame holds at most frameGrowth times
// what was sent (the whole frame's length is reserved from the server's
// budget before: this bounds the memory by the bytes, not the budget).
// From 64 KiB by 16 (a 1 MB produce: 64 KiB, then the frame): 1.07 MB
// allocated and 64 KiB copied per 1 MB produce; from 4 KiB by 8 it was
// 1.31 MB and 292 KiB (4, 32, 256 KiB, the frame), 14% slower to read
// (BenchmarkReadFrame); by doubling, 2 MiB and 1 MiB. A client announcing
// a large frame and sending nothing holds 64 KiB, a bufio buffer's worth.
const (
	frameChunk  = 64 << 10
	frameGrowth = 16
)

// readFrame is ReadFrame with the limit asked for once the length has
// arrived (it is smaller until a SASL client authenticated: a request it
// sends after the answer is checked against the larger one). reserve (if
// set) is called once with the announced length before any of the body is
// read: it may block (the server-wide budget) or refuse (an error ends the
// read). The whole frame is reserved at once, so frames read in parallel
// can never each hold part of the budget and wait for one another; the
// memory itself still grows only as bytes arrive. started (if set) is
// called after that, when the body's bytes are awaited.
func readFrame(r io.Reader, limit func() int, started func(), reserve func(n int) error) ([]byte, error) {
	var l [4]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(l[:]))
	if n < minFrame {
		return nil, fmt.Errorf("%w: length %d", ErrBadFrame, n)
	}
	if maxBytes := limit(); int64(n) > int64(maxBytes) {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, maxBytes)
	}
	if reserve != nil {
		if err := reserve(int(n)); err != nil {
			return nil, err
		}
	}
	if started != nil {
		started()
	}
	var frame []byte
	for len(frame) < int(n) {
		if len(frame) == cap(frame) {
			grown := make([]byte, len(frame), min(max(frameGrowth*cap(frame), frameChunk), int(n)))
			copy(grown, frame)
			frame = grown
		}
		k, err := r.Read(frame[len(frame):min(cap(frame), int(n))])
		frame = frame[:len(frame)+k]
		if err != nil && len(frame) < int(n) {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return frame, nil
}

// RequestHeader is a decoded request header (v0, v1 or v2).
type RequestHeader struct {
	Key           int16
	Version       int16
	CorrelationID int32
	ClientID      *string // nullable
	Flexible      bool    // header v2: the request body is flexible too
}

// ParseRequestHeader decodes the request header at the start of frame and
// returns the body after it. Whether the header carries tagged fields
// (header v2) follows from kmsg's IsFlexible for the key and version. For a
// key kmsg does not know, the fixed fields are returned with ErrUnknownAPI.
// Every length is checked against the bytes present.
func ParseRequestHeader(frame []byte) (h RequestHeader, body []byte, err error) {
	if len(frame) < 8 {
		return h, nil, fmt.Errorf("%w: %d-byte header", ErrBadFrame, len(frame))
	}
	be := binary.BigEndian
	h.Key = int16(be.Uint16(frame))
	h.Version = int16(be.Uint16(frame[2:]))
	h.CorrelationID = int32(be.Uint32(frame[4:]))
	req := kmsg.RequestForKey(h.Key)
	if req == nil {
		return h, nil, fmt.Errorf("%w %d", ErrUnknownAPI, h.Key)
	}
	if h.Version < 0 {
		return h, nil, fmt.Errorf("%w: negative version %d", ErrBadFrame, h.Version)
	}
	req.SetVersion(h.Version)
	h.Flexible = req.IsFlexible()
	b := frame[8:]
	if len(b) < 2 {
		return h, nil, fmt.Errorf("%w: no client id", ErrBadFrame)
	}
	switch n := int16(be.Uint16(b)); {
	case n == -1:
		b = b[2:]
	case n < 0 || int(n) > len(b)-2:
		return h, nil, fmt.Errorf("%w: client id length %d", ErrBadFrame, n)
	default:
		id := string(b[2 : 2+int(n)])
		h.ClientID = &id
		b = b[2+int(n):]
	}
	if h.Flexible {
		r := shapeReader{b: b}
		r.tags()
		if r.bad {
			return h, nil, fmt.Errorf("%w: header tagged fields", ErrBadFrame)
		}
		b = r.b
	}
	return h, b, nil
}

// appendResponse appends one response frame: length, correlation id, the
// response header's tagged fields when flexible (never for ApiVersions,
// whose response header is always v0), and the body.
func appendResponse(dst []byte, key int16, corr int32, resp kmsg.Response) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(corr))
	if resp.IsFlexible() && key != keyApiVersions {
		dst = append(dst, 0) // no tagged fields
	}
	dst = resp.AppendTo(dst)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}
