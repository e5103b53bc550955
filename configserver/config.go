package configserver

import "github.com/vdl-project/vdl/internal/tomlconf"

// LoadConfig reads a config server's TOML (`vdl configserver --config`).
// Unknown keys are an error, so a typo is not silently ignored.
func LoadConfig(path string) (Config, error) {
	var c Config
	return c, tomlconf.Load(path, &c)
}

// Validate fills defaults and checks the configuration, as Start does:
// what deployment tooling (the Helm chart's tests) checks its files with.
func (c *Config) Validate() error { return c.validate() }
