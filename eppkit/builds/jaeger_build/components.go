// The kit's Jaeger (eppkit/builds/jaeger.py builds cmd/jaeger with it in place of Jaeger's own): this file stands in for
// cmd/jaeger/internal/components.go with the components the kit's config (eppkit/components/jaeger.yaml.j2) names,
// as the OpenTelemetry Collector Builder makes a collector of a component list. Every component is Jaeger's or
// the Collector's own.

package internal

import (
	"github.com/open-telemetry/opentelemetry-collector-contrib/extension/healthcheckv2extension"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/processor/batchprocessor"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"

	"github.com/jaegertracing/jaeger/cmd/jaeger/internal/exporters/storageexporter"
	"github.com/jaegertracing/jaeger/cmd/jaeger/internal/extension/jaegerquery"
	"github.com/jaegertracing/jaeger/cmd/jaeger/internal/extension/jaegerstorage"
)

// Components is what cmd/jaeger's Command asks for: the factories of the components the kit's config names.
func Components() (otelcol.Factories, error) {
	factories := otelcol.Factories{Telemetry: otelconftelemetry.NewFactory()}
	var err error
	factories.Extensions, err = otelcol.MakeFactoryMap(
		healthcheckv2extension.NewFactory(), jaegerquery.NewFactory(), jaegerstorage.NewFactory())
	if err != nil {
		return otelcol.Factories{}, err
	}
	if factories.Receivers, err = otelcol.MakeFactoryMap(otlpreceiver.NewFactory()); err != nil {
		return otelcol.Factories{}, err
	}
	if factories.Exporters, err = otelcol.MakeFactoryMap(storageexporter.NewFactory()); err != nil {
		return otelcol.Factories{}, err
	}
	if factories.Processors, err = otelcol.MakeFactoryMap(batchprocessor.NewFactory()); err != nil {
		return otelcol.Factories{}, err
	}
	return factories, nil
}
