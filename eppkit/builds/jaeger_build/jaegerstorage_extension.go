// The kit's Jaeger: jaegerstorage's extension with the memory backend only (eppkit/builds/jaeger.py); the
// storage itself is Jaeger's own (internal/storage/v2/memory).

package jaegerstorage

import (
	"context"
	"errors"
	"fmt"
	"io"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension"

	"github.com/jaegertracing/jaeger/internal/metrics"
	"github.com/jaegertracing/jaeger/internal/storage/v1"
	"github.com/jaegertracing/jaeger/internal/storage/v2/api/tracestore"
	"github.com/jaegertracing/jaeger/internal/storage/v2/memory"
	"github.com/jaegertracing/jaeger/internal/telemetry"
)

var _ Extension = (*storageExt)(nil)

type Extension interface {
	extension.Extension
	TraceStorageFactory(name string) (tracestore.Factory, bool)
	MetricStorageFactory(name string) (storage.MetricStoreFactory, bool)
}

type storageExt struct {
	config    *Config
	telset    component.TelemetrySettings
	factories map[string]tracestore.Factory
}

func newStorageExt(cfg *Config, telset component.TelemetrySettings) *storageExt {
	return &storageExt{config: cfg, telset: telset, factories: make(map[string]tracestore.Factory)}
}

func findExtension(host component.Host) (Extension, error) {
	for id, comp := range host.GetExtensions() {
		if id.Type() != componentType {
			continue
		}
		ext, ok := comp.(Extension)
		if !ok {
			return nil, fmt.Errorf("extension '%s' is not of expected type '%s'", id, componentType)
		}
		return ext, nil
	}
	return nil, fmt.Errorf("cannot find extension '%s' (make sure it's defined earlier in the config)", componentType)
}

func getStorageFactory(name string, host component.Host) (tracestore.Factory, error) {
	ext, err := findExtension(host)
	if err != nil {
		return nil, err
	}
	f, ok := ext.TraceStorageFactory(name)
	if !ok {
		return nil, fmt.Errorf("cannot find definition of storage '%s' in the configuration for extension '%s'",
			name, componentType)
	}
	return f, nil
}

func GetTraceStoreFactory(name string, host component.Host) (tracestore.Factory, error) {
	return getStorageFactory(name, host)
}

func GetMetricStorageFactory(name string, _ component.Host) (storage.MetricStoreFactory, error) {
	return nil, fmt.Errorf("metric storage '%s': this Jaeger is built without metric backends", name)
}

func GetSamplingStoreFactory(name string, host component.Host) (storage.SamplingStoreFactory, error) {
	f, err := getStorageFactory(name, host)
	if err != nil {
		return nil, err
	}
	ssf, ok := f.(storage.SamplingStoreFactory)
	if !ok {
		return nil, fmt.Errorf("storage '%s' does not support sampling store", name)
	}
	return ssf, nil
}

func GetPurger(name string, host component.Host) (storage.Purger, error) {
	f, err := getStorageFactory(name, host)
	if err != nil {
		return nil, err
	}
	purger, ok := f.(storage.Purger)
	if !ok {
		return nil, fmt.Errorf("storage '%s' does not support purging", name)
	}
	return purger, nil
}

func (s *storageExt) Start(_ context.Context, host component.Host) error {
	telset := telemetry.FromOtelComponent(s.telset, host)
	telset.Metrics = telset.Metrics.Namespace(metrics.NSOptions{Name: "jaeger"})
	for name, cfg := range s.config.TraceBackends {
		memTelset := telset
		memTelset.Metrics = telset.Metrics.Namespace(metrics.NSOptions{
			Name: "storage",
			Tags: map[string]string{"name": name, "kind": "memory", "role": "tracestore"},
		})
		factory, err := memory.NewFactory(*cfg.Memory, memTelset)
		if err != nil {
			return fmt.Errorf("failed to initialize storage '%s': %w", name, err)
		}
		s.factories[name] = factory
	}
	return nil
}

func (s *storageExt) Shutdown(context.Context) error {
	var errs []error
	for _, factory := range s.factories {
		if closer, ok := factory.(io.Closer); ok {
			errs = append(errs, closer.Close())
		}
	}
	return errors.Join(errs...)
}

func (s *storageExt) TraceStorageFactory(name string) (tracestore.Factory, bool) {
	f, ok := s.factories[name]
	return f, ok
}

func (*storageExt) MetricStorageFactory(string) (storage.MetricStoreFactory, bool) {
	return nil, false
}
