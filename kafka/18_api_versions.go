package kafka

import "github.com/twmb/franz-go/pkg/kmsg"

// ApiVersions v0–v3. The response header is always v0 (appendResponse).
// An unsupported version is answered in session.receive with a v0 body
// carrying UNSUPPORTED_VERSION and our ranges. v3's client software name
// and version are informational and accepted as sent.
var apiVersionsAPI = api{
	key:       kmsg.ApiVersions,
	modern:    upTo(3),
	kafka0102: upTo(0),
	handle:    handleApiVersions,
	shape:     apiVersionsShape,
	shapeMax:  3,
}

// apiVersionsShape walks the request layout (checkShape).
func apiVersionsShape(r *shapeReader, v int16) {
	if v >= 3 {
		r.str(false)
		r.str(false)
	}
	r.endStruct()
}

// handleApiVersions lists the profile's ranges.
func handleApiVersions(s *Session, sl *slot, req kmsg.Request, _ int64) {
	s.finish(sl, s.apiVersionsResponse(sl.version))
}

func (s *Session) apiVersionsResponse(version int16) *kmsg.ApiVersionsResponse {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(version)
	for _, r := range s.prof.APIs {
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = r.Key, r.Min, r.Max
		resp.ApiKeys = append(resp.ApiKeys, k)
	}
	return resp
}
