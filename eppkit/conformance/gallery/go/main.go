// Command gallery is the plugin gallery's Go dynamic module (go build -buildmode=c-shared): each
// filter is the simplest one that breaks one plugin check's rule, as the gallery's Lua filters are.
// Judge one with `eppkit conformance --plugin --dynamic-module DIR:NAME` (DIR: this folder).
//
//   - holds_trailers: never continues a request that has trailers (bodies-byte-for-byte, h2c).
//   - leaks_go_heap: keeps 32 KiB of every request in a Go slice (memory-bounded: Envoy's RSS grows;
//     its tcmalloc stats do not see the Go heap).
//   - panics_on_cancel: reads, when the stream completes, a pointer set when the answer ends; a stream
//     the client cancels has none, and a panic in a dynamic module ends Envoy (streams-served).
//   - logs_error_without_header: logs an error, through Envoy, for a request without x-tenant, and lets
//     it through all the same (no-module-errors; judge it with --plugin-let-through 'x-tenant: acme').
package main

import (
	"sync"

	sdk "github.com/envoyproxy/envoy/source/extensions/dynamic_modules/sdk/go"
	_ "github.com/envoyproxy/envoy/source/extensions/dynamic_modules/sdk/go/abi"
	"github.com/envoyproxy/envoy/source/extensions/dynamic_modules/sdk/go/shared"
)

func init() {
	sdk.RegisterHttpFilterConfigFactories(map[string]shared.HttpFilterConfigFactory{
		"holds_trailers":            configFactory{newHoldsTrailers},
		"leaks_go_heap":             configFactory{newLeaksGoHeap},
		"panics_on_cancel":          configFactory{newPanicsOnCancel},
		"logs_error_without_header": configFactory{newLogsErrorWithoutHeader},
	})
}

func main() {}

// configFactory makes every stream's filter with newFilter; the gallery's filters take no config.
type configFactory struct {
	newFilter func(shared.HttpFilterHandle) shared.HttpFilter
}

func (c configFactory) Create(shared.HttpFilterConfigHandle, []byte) (shared.HttpFilterFactory, error) {
	return &factory{newFilter: c.newFilter}, nil
}

func (configFactory) CreatePerRoute([]byte) (any, error) { return nil, nil }

type factory struct {
	shared.EmptyHttpFilterFactory
	newFilter func(shared.HttpFilterHandle) shared.HttpFilter
}

func (f *factory) Create(handle shared.HttpFilterHandle) shared.HttpFilter {
	return f.newFilter(handle)
}

// holdsTrailers stops the request at its trailers and never continues it: the request waits until
// the client gives up.
type holdsTrailers struct{ shared.EmptyHttpFilter }

func newHoldsTrailers(shared.HttpFilterHandle) shared.HttpFilter { return &holdsTrailers{} }

func (*holdsTrailers) OnRequestTrailers(shared.HeaderMap) shared.TrailersStatus {
	return shared.TrailersStatusStop
}

// kept is every request's 32 KiB, never let go.
var (
	keptMu sync.Mutex
	kept   [][]byte
)

type leaksGoHeap struct{ shared.EmptyHttpFilter }

func newLeaksGoHeap(shared.HttpFilterHandle) shared.HttpFilter { return &leaksGoHeap{} }

func (*leaksGoHeap) OnRequestHeaders(shared.HeaderMap, bool) shared.HeadersStatus {
	block := make([]byte, 32*1024)
	for i := range block {
		block[i] = byte(i) // touched, so the pages are resident
	}
	keptMu.Lock()
	kept = append(kept, block)
	keptMu.Unlock()
	return shared.HeadersStatusContinue
}

// panicsOnCancel records the answer's size when it ends and reads it when the stream completes. A
// stream the client cancels never ends its answer: the pointer is nil.
type panicsOnCancel struct {
	shared.EmptyHttpFilter
	size     uint64
	answered *uint64
}

func newPanicsOnCancel(shared.HttpFilterHandle) shared.HttpFilter { return &panicsOnCancel{} }

func (p *panicsOnCancel) OnResponseHeaders(_ shared.HeaderMap, endOfStream bool) shared.HeadersStatus {
	if endOfStream {
		p.answered = &p.size
	}
	return shared.HeadersStatusContinue
}

func (p *panicsOnCancel) OnResponseBody(body shared.BodyBuffer, endOfStream bool) shared.BodyStatus {
	p.size += body.GetSize()
	if endOfStream {
		p.answered = &p.size
	}
	return shared.BodyStatusContinue
}

func (p *panicsOnCancel) OnResponseTrailers(shared.HeaderMap) shared.TrailersStatus {
	p.answered = &p.size
	return shared.TrailersStatusContinue
}

func (p *panicsOnCancel) OnStreamComplete() {
	if *p.answered > 1<<40 { // the bug: a cancelled stream's answer never ended, answered is nil
		p.size = 0
	}
}

// logsErrorWithoutHeader is a gate's bug: it says in Envoy's log that a request has no x-tenant, at
// error level, and lets the request through as if it had one.
type logsErrorWithoutHeader struct {
	shared.EmptyHttpFilter
	handle shared.HttpFilterHandle
}

func newLogsErrorWithoutHeader(handle shared.HttpFilterHandle) shared.HttpFilter {
	return &logsErrorWithoutHeader{handle: handle}
}

func (f *logsErrorWithoutHeader) OnRequestHeaders(headers shared.HeaderMap, _ bool) shared.HeadersStatus {
	if headers.GetOne("x-tenant").ToString() == "" {
		f.handle.Log(shared.LogLevelError, "logs_error_without_header: no x-tenant on %s %s",
			headers.GetOne(":method").ToString(), headers.GetOne(":path").ToString())
	}
	return shared.HeadersStatusContinue
}
