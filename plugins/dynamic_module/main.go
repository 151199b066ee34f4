// Command libeppkit_callout is an Envoy dynamic module (go build -buildmode=c-shared).
//
// It registers the HTTP filter of the kit's dynmod-callout mode, which Envoy picks by the
// filter_name of its DynamicModuleFilter config:
//
//	eppkit_callout  ask the routing service which endpoint serves the request
//	                (internal/callout, docs/modes-dynmod.md)
//
// The multipart experiment's filter is a module of its own (experiments/multipart/module).
package main

import (
	sdk "github.com/envoyproxy/envoy/source/extensions/dynamic_modules/sdk/go"
	_ "github.com/envoyproxy/envoy/source/extensions/dynamic_modules/sdk/go/abi"
	"github.com/envoyproxy/envoy/source/extensions/dynamic_modules/sdk/go/shared"

	"github.com/eppkit/eppkit/plugins/dynamic_module/internal/callout"
	"github.com/eppkit/eppkit/plugins/dynamic_module/internal/envoytrace"
)

func init() {
	sdk.RegisterHttpFilterConfigFactories(map[string]shared.HttpFilterConfigFactory{
		callout.FilterName: callout.ConfigFactory{StartSpan: envoySpan},
	})
}

// envoySpan gives each callout an Envoy child span of the request's span (nil: tracing off for
// the request, or this Envoy lacks the span ABI; the client's traceparent is forwarded then).
func envoySpan(handle shared.HttpFilterHandle) callout.CalloutSpan {
	if span := envoytrace.StartChild(handle, callout.SpanName); span != nil {
		return span
	}
	return nil
}

func main() {}
