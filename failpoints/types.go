package failpoints

import "strings"

// Module is VDL's module path. A failpoint's full name (the one the failpoint
// library, GO_FAILPOINTS and the source rewrite use) is Module + "/" + its
// short name.
const Module = "github.com/vdl-project/vdl"

// Prefix is the admin HTTP path the control plane is mounted under.
const Prefix = "/debug/failpoints"

// Def describes one failpoint marker. It is registered with Register, in a
// file guarded by the "failpoint" build tag, in the package holding the marker.
type Def struct {
	// Name is the short name: the package path relative to Module, "/", and
	// the marker's name, e.g. "storage/beforeSync".
	Name string
	// Place says where the marker is (file, function, before/after what).
	Place string
	// Effect says what each useful term does, e.g.
	// `return(true): crash (SIGKILL) before fsync; sleep(ms): delay fsync`.
	Effect string
}

// Info is one failpoint as the control plane reports it.
type Info struct {
	Name     string `json:"name"`      // short name, e.g. storage/beforeSync
	FullName string `json:"full_name"` // import path + "/" + marker name
	Place    string `json:"place"`
	Effect   string `json:"effect"`
	Enabled  bool   `json:"enabled"`
	Term     string `json:"term,omitempty"` // current term; empty when disabled
	// Hits counts the evaluations that fired (the marker body ran) since the
	// process started. Never reset.
	Hits uint64 `json:"hits"`
}

// FullName returns the failpoint library's name for a short name. A name
// that already starts with Module + "/" is returned as it is.
func FullName(name string) string {
	if strings.HasPrefix(name, Module+"/") {
		return name
	}
	return Module + "/" + name
}

// ShortName is the inverse of FullName.
func ShortName(name string) string {
	return strings.TrimPrefix(name, Module+"/")
}
