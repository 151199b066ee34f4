module github.com/eppkit/eppkit/plugins/dynamic_module

go 1.25.6

require (
	github.com/envoyproxy/envoy/source/extensions/dynamic_modules v0.0.0-20260423231439-f1dd21b16c24
	go.uber.org/mock v0.6.0
)
