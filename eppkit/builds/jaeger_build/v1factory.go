// The kit's Jaeger (eppkit/builds/jaeger.py): of this package the query service's flags use only ArchiveStorage; the
// v1 storage factories (Elasticsearch, Kafka, Cassandra, ...) are not compiled.

package factory

import "github.com/jaegertracing/jaeger/internal/storage/v1/api/spanstore"

type ArchiveStorage struct {
	Reader spanstore.Reader
	Writer spanstore.Writer
}
