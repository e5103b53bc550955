// Package users owns the Kafka SASL users file: who may connect and the
// SCRAM credentials they prove themselves with. Passwords are never stored:
// each user has, per SCRAM mechanism, a salt, an iteration count and the
// StoredKey and ServerKey of RFC 5802 (base64), the same facts Kafka keeps
// in ZooKeeper. A SCRAM exchange checks a client's proof against them; a
// PLAIN login (TLS listeners only) derives the StoredKey from the password
// it was given and compares.
//
// The file is TOML:
//
//	[[user]]
//	name = "alice"
//	[user.scram_sha_256]
//	salt = "…"
//	iterations = 4096
//	stored_key = "…"
//	server_key = "…"
//	[user.scram_sha_512]
//	…
//
// `vdl user add` and `vdl user remove` edit it; a server rereads it when it
// changes, so adding a user needs no restart.
package users

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"

	"github.com/BurntSushi/toml"
	"github.com/xdg-go/scram"
)

// SCRAM mechanisms, by their Kafka names.
const (
	ScramSHA256 = "SCRAM-SHA-256"
	ScramSHA512 = "SCRAM-SHA-512"
)

// DefaultIterations is the PBKDF2 iteration count new credentials get
// (Kafka's minimum and librdkafka's default).
const DefaultIterations = 4096

// Credential is one user's SCRAM credential for one hash.
type Credential struct {
	Salt       string `toml:"salt"` // base64
	Iterations int    `toml:"iterations"`
	StoredKey  string `toml:"stored_key"` // base64
	ServerKey  string `toml:"server_key"` // base64
}

// User is one entry of the file.
type User struct {
	Name        string      `toml:"name"`
	ScramSHA256 *Credential `toml:"scram_sha_256,omitempty"`
	ScramSHA512 *Credential `toml:"scram_sha_512,omitempty"`
}

// File is the users file's content.
type File struct {
	Users []User `toml:"user"`
}

var validName = regexp.MustCompile(`^[A-Za-z0-9._@-]{1,128}$`)

// CheckName says whether name can be a user name: 1-128 characters of
// letters, digits and . _ @ -, so that it needs no SCRAM escaping.
func CheckName(name string) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("user name %q: use 1-128 letters, digits, '.', '_', '@' or '-'", name)
	}
	return nil
}

// Load reads a users file and checks every credential decodes.
func Load(path string) (*File, error) {
	var f File
	md, err := toml.DecodeFile(path, &f)
	if err != nil {
		return nil, fmt.Errorf("users file %s: %w", path, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		return nil, fmt.Errorf("users file %s: unknown key %s", path, und[0])
	}
	seen := map[string]bool{}
	for _, u := range f.Users {
		if err := CheckName(u.Name); err != nil {
			return nil, fmt.Errorf("users file %s: %w", path, err)
		}
		if seen[u.Name] {
			return nil, fmt.Errorf("users file %s: user %q appears twice", path, u.Name)
		}
		seen[u.Name] = true
		for mech, c := range map[string]*Credential{ScramSHA256: u.ScramSHA256, ScramSHA512: u.ScramSHA512} {
			if c == nil {
				continue
			}
			if _, err := c.stored(); err != nil {
				return nil, fmt.Errorf("users file %s: user %q, %s: %w", path, u.Name, mech, err)
			}
		}
	}
	return &f, nil
}

// Save writes the file atomically (a temporary file renamed over it),
// readable by its owner only.
func (f *File) Save(path string) error {
	var b bytes.Buffer
	b.WriteString("# VDL Kafka SASL users: edit with `vdl user add/remove` (docs/security.md)\n")
	if err := toml.NewEncoder(&b).Encode(f); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".users-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b.Bytes()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Find returns the user named name.
func (f *File) Find(name string) (User, bool) {
	for _, u := range f.Users {
		if u.Name == name {
			return u, true
		}
	}
	return User{}, false
}

// Set adds a user, or replaces the credentials of one, for password: a
// fresh salt and both SCRAM hashes.
func (f *File) Set(name, password string, iterations int) error {
	if err := CheckName(name); err != nil {
		return err
	}
	if password == "" {
		return errors.New("empty password")
	}
	if iterations < DefaultIterations {
		return fmt.Errorf("iterations %d: at least %d", iterations, DefaultIterations)
	}
	u := User{Name: name}
	var err error
	if u.ScramSHA256, err = newCredential(scram.SHA256, name, password, iterations); err != nil {
		return err
	}
	if u.ScramSHA512, err = newCredential(scram.SHA512, name, password, iterations); err != nil {
		return err
	}
	if k := slices.IndexFunc(f.Users, func(o User) bool { return o.Name == name }); k >= 0 {
		f.Users[k] = u
	} else {
		f.Users = append(f.Users, u)
	}
	return nil
}

// Remove deletes a user; false if there was none.
func (f *File) Remove(name string) bool {
	n := len(f.Users)
	f.Users = slices.DeleteFunc(f.Users, func(u User) bool { return u.Name == name })
	return len(f.Users) < n
}

func newCredential(h scram.HashGeneratorFcn, name, password string, iterations int) (*Credential, error) {
	salt := make([]byte, 24)
	if _, err := rand.Read(salt); err != nil {
		return nil, err
	}
	c, err := h.NewClient(name, password, "")
	if err != nil {
		return nil, err
	}
	sc := c.GetStoredCredentials(scram.KeyFactors{Salt: string(salt), Iters: iterations})
	enc := base64.StdEncoding.EncodeToString
	return &Credential{Salt: enc(salt), Iterations: iterations, StoredKey: enc(sc.StoredKey), ServerKey: enc(sc.ServerKey)}, nil
}

// stored decodes the credential for the SCRAM library.
func (c *Credential) stored() (scram.StoredCredentials, error) {
	dec := base64.StdEncoding.DecodeString
	salt, err := dec(c.Salt)
	if err != nil || len(salt) == 0 {
		return scram.StoredCredentials{}, errors.New("salt is not base64")
	}
	stored, err := dec(c.StoredKey)
	if err != nil || len(stored) == 0 {
		return scram.StoredCredentials{}, errors.New("stored_key is not base64")
	}
	server, err := dec(c.ServerKey)
	if err != nil || len(server) == 0 {
		return scram.StoredCredentials{}, errors.New("server_key is not base64")
	}
	if c.Iterations < 1 || c.Iterations > 1<<20 {
		return scram.StoredCredentials{}, fmt.Errorf("iterations %d out of range", c.Iterations)
	}
	return scram.StoredCredentials{KeyFactors: scram.KeyFactors{Salt: string(salt), Iters: c.Iterations},
		StoredKey: stored, ServerKey: server}, nil
}

// hash returns the SCRAM hash of a mechanism and the user's credential
// for it (nil if the user has none).
func (u User) credential(mechanism string) (scram.HashGeneratorFcn, *Credential) {
	switch mechanism {
	case ScramSHA256:
		return scram.SHA256, u.ScramSHA256
	case ScramSHA512:
		return scram.SHA512, u.ScramSHA512
	}
	return nil, nil
}

// Lookup returns name's stored credentials for a SCRAM mechanism.
func (f *File) Lookup(mechanism, name string) (scram.StoredCredentials, error) {
	u, ok := f.Find(name)
	if !ok {
		return scram.StoredCredentials{}, fmt.Errorf("unknown user %q", name)
	}
	_, c := u.credential(mechanism)
	if c == nil {
		return scram.StoredCredentials{}, fmt.Errorf("user %q has no %s credential", name, mechanism)
	}
	return c.stored()
}

// CheckPassword verifies a PLAIN login: the password must derive the
// user's StoredKey (SCRAM-SHA-512's if it has one, else SHA-256's).
func (f *File) CheckPassword(name, password string) error {
	u, ok := f.Find(name)
	if !ok {
		return errors.New("unknown user or wrong password")
	}
	for _, mech := range []string{ScramSHA512, ScramSHA256} {
		h, c := u.credential(mech)
		if c == nil {
			continue
		}
		sc, err := c.stored()
		if err != nil {
			return err
		}
		cl, err := h.NewClient(name, password, "")
		if err != nil {
			return errors.New("unknown user or wrong password")
		}
		got := cl.GetStoredCredentials(sc.KeyFactors)
		if subtle.ConstantTimeCompare(got.StoredKey, sc.StoredKey) == 1 {
			return nil
		}
		return errors.New("unknown user or wrong password")
	}
	return errors.New("unknown user or wrong password")
}
