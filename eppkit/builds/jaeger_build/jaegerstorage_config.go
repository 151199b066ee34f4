// The kit's Jaeger keeps its traces in memory only (eppkit/builds/jaeger.py): this file stands in for
// jaegerstorage's config.go, so the other backends (Badger, Cassandra, Elasticsearch, ...) are not compiled.

package jaegerstorage

import (
	"errors"
	"fmt"

	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/xconfmap"

	"github.com/jaegertracing/jaeger/internal/storage/v1/memory"
)

var (
	_ xconfmap.Validator  = (*Config)(nil)
	_ confmap.Unmarshaler = (*TraceBackend)(nil)
)

type Config struct {
	TraceBackends map[string]TraceBackend `mapstructure:"backends"`
}

type TraceBackend struct {
	Memory *memory.Configuration `mapstructure:"memory"`
}

func (cfg *TraceBackend) Unmarshal(conf *confmap.Conf) error {
	if conf.IsSet("memory") {
		cfg.Memory = &memory.Configuration{MaxTraces: 1_000_000}
	}
	return conf.Unmarshal(cfg)
}

func (cfg *Config) Validate() error {
	if len(cfg.TraceBackends) == 0 {
		return errors.New("at least one storage is required")
	}
	for name, b := range cfg.TraceBackends {
		if b.Memory == nil {
			return fmt.Errorf("storage '%s': this Jaeger is built with the memory backend only", name)
		}
	}
	return nil
}
