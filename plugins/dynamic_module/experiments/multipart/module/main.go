// Command libeppkit_multipart_probe is the two-phase multipart experiment's own dynamic module
// (docs/dynmod-multipart.md): only the eppkit_multipart_probe filter, built apart from the
// production module so the kit's libeppkit_callout.so carries no experiment code.
//
//	python plugins/dynamic_module/experiments/multipart/run.py   # builds it, then runs the experiment
package main

import (
	sdk "github.com/envoyproxy/envoy/source/extensions/dynamic_modules/sdk/go"
	_ "github.com/envoyproxy/envoy/source/extensions/dynamic_modules/sdk/go/abi"
	"github.com/envoyproxy/envoy/source/extensions/dynamic_modules/sdk/go/shared"

	"github.com/eppkit/eppkit/plugins/dynamic_module/experiments/multipart/probe"
)

func init() {
	sdk.RegisterHttpFilterConfigFactories(map[string]shared.HttpFilterConfigFactory{
		probe.FilterName: probe.ConfigFactory{},
	})
}

func main() {}
