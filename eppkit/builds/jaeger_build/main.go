// The kit's Jaeger (eppkit/builds/jaeger.py): cmd/jaeger's main without the `docs` and Elasticsearch `es-mappings`
// subcommands (the latter compiles the Elasticsearch client); `jaeger --config FILE` and `jaeger version` as upstream.

package main

import (
	"log"

	"github.com/jaegertracing/jaeger/cmd/jaeger/internal"
	"github.com/jaegertracing/jaeger/internal/version"
)

func main() {
	command := internal.Command()
	command.AddCommand(version.Command())
	if err := command.Execute(); err != nil {
		log.Fatal(err)
	}
}
