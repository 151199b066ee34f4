// Package probe is the eppkit_multipart_probe HTTP filter: the two-phase multipart experiment
// (docs/dynmod-multipart.md). It answers one question with running code: can a Go dynamic
// module at this SDK version run the two-phase multipart flow?
//
//  1. buffer the client's body to its end;
//  2. split it at split_marker into part 1 (request payload) and part 2 (metadata + closing
//     boundary);
//  3. own the upstream request with the SDK's HTTP stream API (StartHttpStream): send the
//     headers and part 1 with end_of_stream=false, so the request stays open;
//  4. stream the upstream's response headers and body to the client as they come
//     (SendResponseHeaders / SendResponseData);
//  5. once the response headers (or the first body chunk) arrived, inject part 2 with
//     end_of_stream=true (SendHttpStreamData, run from a Scheduler callback).
//
// The filter is terminal for its requests: the router never sees them. That is the price of
// the approach (no router retries, no upstream span, no %UPSTREAM_HOST% in access logs).
package probe

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/envoyproxy/envoy/source/extensions/dynamic_modules/sdk/go/shared"
	"github.com/envoyproxy/envoy/source/extensions/dynamic_modules/sdk/go/shared/utility"
)

const FilterName = "eppkit_multipart_probe"

// EvidenceHeader is added to the client's response: what the probe did and when (ms since the
// upstream request started), so an experiment can read the order without the module's logs.
const EvidenceHeader = "x-eppkit-multipart"

type Config struct {
	// Cluster the probe opens its upstream stream to (required).
	Cluster string `json:"cluster"`
	// SplitMarker starts part 2: part 1 is the body before its first occurrence (required).
	SplitMarker string `json:"split_marker"`
	// InjectAfter is "headers" (inject part 2 when the response headers arrive) or
	// "first_data" (when the first response body chunk, the first token, arrives).
	InjectAfter string `json:"inject_after"`
	// TimeoutMs bounds the whole upstream stream; 0 = no timeout.
	TimeoutMs uint64 `json:"timeout_ms"`
}

func ParseConfig(raw []byte) (*Config, error) {
	cfg := &Config{InjectAfter: "headers"}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(cfg); err != nil {
		return nil, fmt.Errorf("%s: bad filter_config: %w", FilterName, err)
	}
	if cfg.Cluster == "" || cfg.SplitMarker == "" {
		return nil, errors.New(FilterName + ": cluster and split_marker are required")
	}
	if cfg.InjectAfter != "headers" && cfg.InjectAfter != "first_data" {
		return nil, fmt.Errorf("%s: inject_after must be headers or first_data, not %q", FilterName, cfg.InjectAfter)
	}
	return cfg, nil
}

// Split cuts body before the first split marker. Without the marker, part 2 is empty and the
// probe degrades to a plain one-phase proxy.
func Split(body []byte, marker string) (part1, part2 []byte) {
	i := bytes.Index(body, []byte(marker))
	if i < 0 {
		return body, nil
	}
	return body[:i], body[i:]
}

// hopByHop are not copied between the client's request/response and the owned stream.
var hopByHop = map[string]bool{
	"connection": true, "keep-alive": true, "transfer-encoding": true, "te": true,
	"upgrade": true, "proxy-connection": true, "trailer": true,
}

type ConfigFactory struct{}

func (ConfigFactory) Create(handle shared.HttpFilterConfigHandle, raw []byte) (shared.HttpFilterFactory, error) {
	cfg, err := ParseConfig(raw)
	if err != nil {
		handle.Log(shared.LogLevelError, "%v", err)
		return nil, err
	}
	return &Factory{cfg: cfg}, nil
}

func (ConfigFactory) CreatePerRoute([]byte) (any, error) { return nil, nil }

type Factory struct {
	shared.EmptyHttpFilterFactory
	cfg *Config
}

func (f *Factory) Create(handle shared.HttpFilterHandle) shared.HttpFilter {
	return &Probe{handle: handle, cfg: f.cfg, now: time.Now}
}

// Probe is one client request carried over an owned upstream stream.
type Probe struct {
	shared.EmptyHttpFilter
	handle      shared.HttpFilterHandle
	cfg         *Config
	now         func() time.Time
	headers     [][2]string
	scheduler   shared.Scheduler
	streamID    uint64
	active      bool
	part2       []byte
	injected    bool
	headersSent bool
	t0          time.Time
	events      []string
}

func (p *Probe) mark(event string) {
	p.events = append(p.events, fmt.Sprintf("%s@%.1f", event, float64(p.now().Sub(p.t0).Microseconds())/1000))
}

func (p *Probe) OnRequestHeaders(headers shared.HeaderMap, endOfStream bool) shared.HeadersStatus {
	if endOfStream {
		return shared.HeadersStatusContinue // nothing to split: let the router have it
	}
	for _, kv := range headers.GetAll() {
		name := strings.ToLower(kv[0].ToString())
		if !hopByHop[name] {
			p.headers = append(p.headers, [2]string{name, kv[1].ToString()})
		}
	}
	return shared.HeadersStatusStop
}

func (p *Probe) OnRequestBody(body shared.BodyBuffer, endOfStream bool) shared.BodyStatus {
	if p.headers == nil {
		return shared.BodyStatusContinue
	}
	if !endOfStream {
		return shared.BodyStatusStopAndBuffer
	}
	part1, part2 := Split(utility.ReadWholeRequestBody(p.handle), p.cfg.SplitMarker)
	p.part2 = part2
	p.scheduler = p.handle.GetScheduler() // only obtainable inside an OnRequest* callback
	p.t0 = p.now()
	res, id := p.handle.StartHttpStream(p.cfg.Cluster, p.headers, part1, len(part2) == 0, p.cfg.TimeoutMs, p)
	if res != shared.HttpCalloutInitSuccess {
		p.handle.SendLocalResponse(502, [][2]string{{"content-type", "application/json"}},
			[]byte(fmt.Sprintf(`{"error":{"message":"multipart probe: upstream stream did not start (%d)","type":"BadGatewayError","param":null,"code":502}}`, res)),
			"eppkit_multipart_start_failed")
		return shared.BodyStatusStopNoBuffer
	}
	p.streamID, p.active = id, true
	p.mark(fmt.Sprintf("part1_sent:%d", len(part1)))
	if len(part2) == 0 {
		p.injected = true
	}
	return shared.BodyStatusStopNoBuffer
}

// scheduleInject sends part 2 and ends the upstream request, from a scheduled callback on the
// stream's worker thread (not re-entrantly from inside the stream's own event).
func (p *Probe) scheduleInject(after string) {
	if p.injected {
		return
	}
	p.injected = true
	p.scheduler.Schedule(func() {
		if !p.active {
			return
		}
		ok := p.handle.SendHttpStreamData(p.streamID, p.part2, true)
		p.mark(fmt.Sprintf("part2_sent_after_%s:%d:%t", after, len(p.part2), ok))
	})
}

func (p *Probe) OnHttpStreamHeaders(_ uint64, headers [][2]shared.UnsafeEnvoyBuffer, endStream bool) {
	p.mark("response_headers")
	if p.cfg.InjectAfter == "headers" {
		p.scheduleInject("headers")
	}
	out := make([][2]string, 0, len(headers)+1)
	for _, kv := range headers {
		name := strings.ToLower(kv[0].ToString())
		if !hopByHop[name] && name != "content-length" {
			out = append(out, [2]string{name, kv[1].ToString()})
		}
	}
	p.headersSent = true
	if endStream {
		out = append(out, [2]string{EvidenceHeader, strings.Join(p.events, " ")})
	}
	p.handle.SendResponseHeaders(out, endStream)
}

func (p *Probe) OnHttpStreamData(_ uint64, body []shared.UnsafeEnvoyBuffer, endStream bool) {
	var data []byte
	for _, chunk := range body {
		data = append(data, chunk.ToUnsafeBytes()...)
	}
	if len(data) > 0 && p.cfg.InjectAfter == "first_data" && !p.injected {
		p.mark("first_data")
		p.scheduleInject("first_data")
	}
	if endStream {
		p.mark("response_end")
		// The evidence travels as a trailer: response headers left before the end was known.
		p.handle.SendResponseData(data, false)
		p.finish(nil)
		return
	}
	p.handle.SendResponseData(data, false)
}

func (p *Probe) OnHttpStreamTrailers(_ uint64, trailers [][2]shared.UnsafeEnvoyBuffer) {
	p.mark("response_end")
	var extra [][2]string
	for _, kv := range trailers {
		extra = append(extra, [2]string{kv[0].ToString(), kv[1].ToString()})
	}
	p.finish(extra)
}

// finish ends the client's response with the evidence trailer and logs the same line. It runs
// at the upstream response's end: once the client's stream is done Envoy destroys the filter,
// so OnHttpStreamComplete may never reach the module.
func (p *Probe) finish(trailers [][2]string) {
	evidence := strings.Join(p.events, " ")
	p.handle.Log(shared.LogLevelInfo, "%s: %s", FilterName, evidence)
	p.handle.SendResponseTrailers(append([][2]string{{EvidenceHeader, evidence}}, trailers...))
}

func (p *Probe) OnHttpStreamComplete(uint64) {
	p.active = false
}

func (p *Probe) OnHttpStreamReset(_ uint64, reason shared.HttpStreamResetReason) {
	p.active = false
	p.mark(fmt.Sprintf("upstream_reset:%d", reason))
	p.handle.Log(shared.LogLevelWarn, "%s: upstream stream reset: %s", FilterName, strings.Join(p.events, " "))
	if !p.headersSent {
		p.headersSent = true
		p.handle.SendLocalResponse(502, [][2]string{{"content-type", "application/json"}},
			[]byte(`{"error":{"message":"multipart probe: upstream stream reset","type":"BadGatewayError","param":null,"code":502}}`),
			"eppkit_multipart_upstream_reset")
		return
	}
	// Headers already went to the client and this SDK has no way to reset the client's stream
	// (the 1.40 ABI has http_filter_reset_stream; the SDK does not wrap it): end the response,
	// with the reset in the evidence trailer, rather than leave the client waiting.
	p.finish(nil)
}

// No OnDestroy: Envoy resets every stream a filter still owns when the filter is destroyed
// (DynamicModuleHttpFilter::destroy), and the handle must not be used from OnDestroy.
