// Package tomlconf reads VDL's TOML configuration files strictly: an
// unknown key is an error naming it, so a typo is reported, not ignored.
// The servers' and the config servers' configurations both use it.
package tomlconf

import (
	"fmt"
	"os"
	"strings"

	"github.com/BurntSushi/toml"
)

// Load decodes the TOML file at path into v.
func Load(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	md, err := toml.Decode(string(data), v)
	if err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	if un := md.Undecoded(); len(un) > 0 {
		keys := make([]string, len(un))
		for i, k := range un {
			keys[i] = k.String()
		}
		return fmt.Errorf("config %s: unknown keys: %s", path, strings.Join(keys, ", "))
	}
	return nil
}
