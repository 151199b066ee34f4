package callout

import (
	"strconv"
	"strings"

	"github.com/envoyproxy/envoy/source/extensions/dynamic_modules/sdk/go/shared"
	"github.com/envoyproxy/envoy/source/extensions/dynamic_modules/sdk/go/shared/utility"
)

// FilterName is the filter_name Envoy's DynamicModuleFilter config uses for this filter.
const FilterName = "eppkit_callout"

// MetadataNamespace holds the outcome as dynamic metadata (status; endpoint, scorer, reason of
// a pick), for access logs: %DYNAMIC_METADATA(eppkit.callout:status)%.
const MetadataNamespace = "eppkit.callout"

// StatusHeader tells the client what the filter did, with the Lua callout's values:
// "picked <ip:port>", "rejected <status>", "fail-open: <why>", "unavailable".
const StatusHeader = "x-eppkit-callout"

// SpanName is the operation name of the callout's Envoy span (a child of the request's span).
const SpanName = "dynmod callout"

// CalloutSpan is the span that brackets one callout (internal/envoytrace in the module).
type CalloutSpan interface {
	IDs() (traceID, spanID string)
	SetTag(key, value string)
	Finish()
}

// SpanStarter starts the callout's span for a request; a nil starter or a nil span means no
// span, and the client's traceparent is forwarded instead.
type SpanStarter func(shared.HttpFilterHandle) CalloutSpan

// ConfigFactory parses the filter_config once per Envoy filter config.
type ConfigFactory struct {
	StartSpan SpanStarter
}

func (c ConfigFactory) Create(handle shared.HttpFilterConfigHandle, raw []byte) (shared.HttpFilterFactory, error) {
	cfg, err := ParseConfig(raw)
	if err != nil {
		handle.Log(shared.LogLevelError, "%v", err)
		return nil, err
	}
	handle.Log(shared.LogLevelInfo, "eppkit_callout: cluster=%s path=%s timeout_ms=%d failure_mode_allow=%t",
		cfg.Cluster, cfg.Path, cfg.TimeoutMs, cfg.FailureModeAllow)
	return &Factory{Config: cfg, StartSpan: c.StartSpan}, nil
}

func (ConfigFactory) CreatePerRoute(raw []byte) (any, error) { return nil, nil }

// Factory makes one Filter per request.
type Factory struct {
	shared.EmptyHttpFilterFactory
	Config    *Config
	StartSpan SpanStarter
}

func (f *Factory) Create(handle shared.HttpFilterHandle) shared.HttpFilter {
	return &Filter{handle: handle, cfg: f.Config, startSpan: f.StartSpan}
}

type state int

const (
	stateStart     state = iota
	stateNotPicked       // not a POST: the route's pool serves it
	stateAwaitBody       // headers seen, buffering the body
	stateCalling         // callout in flight, request held
	stateRouted          // destination set, request continued
	stateFailOpen        // callout failed, request continued to the pool
	stateReplied         // local reply sent (rejected, or failed closed)
)

// Filter holds one request until the picker answers.
type Filter struct {
	shared.EmptyHttpFilter
	handle    shared.HttpFilterHandle
	cfg       *Config
	startSpan SpanStarter
	state     state
	headers   [][2]string // copy of the client's request headers, for the callout
	span      CalloutSpan
	status    string // StatusHeader value for the response
}

func (f *Filter) OnRequestHeaders(headers shared.HeaderMap, endOfStream bool) shared.HeadersStatus {
	// Only the picker names the destination: a client-sent one would bypass it.
	if len(headers.Get(f.cfg.DestinationHeader)) > 0 {
		headers.Remove(f.cfg.DestinationHeader)
		f.handle.ClearRouteCache()
	}
	// Nor the prefiller and encoders (the routes do not match on these: no cache to clear).
	for _, name := range []string{PrefillerHeader, EncodersHeader} {
		if len(headers.Get(name)) > 0 {
			headers.Remove(name)
		}
	}
	if headers.GetOne(":method").ToUnsafeString() != "POST" {
		f.state = stateNotPicked // GET /v1/models, /health: round-robin pool
		return shared.HeadersStatusContinue
	}
	all := headers.GetAll()
	f.headers = make([][2]string, 0, len(all))
	for _, kv := range all {
		f.headers = append(f.headers, [2]string{kv[0].ToString(), kv[1].ToString()})
	}
	if !endOfStream {
		f.state = stateAwaitBody
		return shared.HeadersStatusStop
	}
	// A POST without a body: the picker judges it (its 400 reaches the client).
	f.state = stateCalling
	if f.startCallout(nil) || f.state == stateReplied {
		return shared.HeadersStatusStop
	}
	return shared.HeadersStatusContinue
}

func (f *Filter) OnRequestBody(body shared.BodyBuffer, endOfStream bool) shared.BodyStatus {
	switch f.state {
	case stateAwaitBody:
	case stateCalling:
		return shared.BodyStatusStopAndBuffer
	case stateReplied:
		return shared.BodyStatusStopNoBuffer
	default:
		return shared.BodyStatusContinue
	}
	if !endOfStream {
		return shared.BodyStatusStopAndBuffer
	}
	return f.callWithBody(utility.ReadWholeRequestBody(f.handle))
}

func (f *Filter) OnRequestTrailers(trailers shared.HeaderMap) shared.TrailersStatus {
	if f.state != stateAwaitBody {
		if f.state == stateCalling || f.state == stateReplied {
			return shared.TrailersStatusStop
		}
		return shared.TrailersStatusContinue
	}
	// Trailers end the stream; the body is all buffered by now.
	var body []byte
	for _, chunk := range f.handle.BufferedRequestBody().GetChunks() {
		body = append(body, chunk.ToUnsafeBytes()...)
	}
	if f.callWithBody(body) == shared.BodyStatusContinue {
		return shared.TrailersStatusContinue
	}
	return shared.TrailersStatusStop
}

func (f *Filter) callWithBody(body []byte) shared.BodyStatus {
	f.state = stateCalling
	if f.startCallout(body) {
		return shared.BodyStatusStopAndBuffer
	}
	if f.state == stateReplied {
		return shared.BodyStatusStopNoBuffer
	}
	return shared.BodyStatusContinue // failed open inline
}

// startCallout sends the pick request. It returns true when the callout is in flight; false
// when it could not start, in which case the failure was already applied inline.
func (f *Filter) startCallout(body []byte) bool {
	traceparent := ""
	if f.startSpan != nil {
		if span := f.startSpan(f.handle); span != nil {
			f.span = span
			traceID, spanID := span.IDs()
			traceparent = Traceparent(traceID, spanID, clientTraceparent(f.headers))
			span.SetTag("upstream_cluster", f.cfg.Cluster)
			span.SetTag("component", FilterName)
		}
	}
	result, _ := f.handle.HttpCallout(f.cfg.Cluster, CalloutHeaders(f.cfg, f.headers, traceparent), body, f.cfg.TimeoutMs, f)
	if result == shared.HttpCalloutInitSuccess {
		return true
	}
	f.apply(Decision{Outcome: OutcomeFailure, Detail: "callout could not start: " + resultName(initResults, result, "init result ")}, "", true)
	return false
}

// OnHttpCalloutDone is the picker's answer (shared.HttpCalloutCallback).
func (f *Filter) OnHttpCalloutDone(_ uint64, result shared.HttpCalloutResult,
	headers [][2]shared.UnsafeEnvoyBuffer, body []shared.UnsafeEnvoyBuffer) {
	if f.state != stateCalling {
		return
	}
	resp := Response{Completed: result == shared.HttpCalloutSuccess, FailureReason: resultName(calloutResults, result, "failed with result ")}
	if resp.Completed {
		hs := make([][2]string, 0, len(headers))
		for _, kv := range headers {
			hs = append(hs, [2]string{kv[0].ToString(), kv[1].ToString()})
		}
		resp.Headers = HeaderIndex(hs)
		for _, chunk := range body {
			resp.Body = append(resp.Body, chunk.ToUnsafeBytes()...)
		}
	}
	f.apply(Decide(f.cfg, resp), resp.Headers[":status"], false)
}

// apply carries out a decision. inline is true inside OnRequest* (the return status continues
// the request), false in the callout callback (ContinueRequest does).
func (f *Filter) apply(d Decision, calloutStatus string, inline bool) {
	f.endSpan(d, calloutStatus)
	switch d.Outcome {
	case OutcomeRoute:
		request := f.handle.RequestHeaders()
		// The same value in both, as the GAIE EPP protocol has it: the route matches on the metadata.
		request.Set(f.cfg.DestinationHeader, d.Endpoints)
		f.handle.SetMetadata(f.cfg.LbMetadataNamespace, f.cfg.DestinationHeader, d.Endpoints)
		if d.Prefiller != "" {
			request.Set(PrefillerHeader, d.Prefiller)
			f.handle.SetMetadata(MetadataNamespace, "prefiller", d.Prefiller)
		}
		if d.Encoders != "" {
			request.Set(EncodersHeader, d.Encoders)
			f.handle.SetMetadata(MetadataNamespace, "encoders", d.Encoders)
		}
		f.status = "picked " + d.Endpoint
		f.handle.SetMetadata(MetadataNamespace, "status", f.status)
		f.handle.SetMetadata(MetadataNamespace, "endpoint", d.Endpoint)
		if d.Scorer != "" {
			f.handle.SetMetadata(MetadataNamespace, "scorer", d.Scorer)
		}
		if d.Reason != "" {
			f.handle.SetMetadata(MetadataNamespace, "reason", d.Reason)
		}
		f.handle.ClearRouteCache() // the route table matches on the destination metadata
		f.state = stateRouted
		f.handle.Log(shared.LogLevelDebug, "eppkit_callout: picked %s (scorer=%s reason=%s)", d.Endpoint, d.Scorer, d.Reason)
	case OutcomeReject:
		f.state = stateReplied
		status := "rejected " + strconv.Itoa(int(d.Status))
		f.handle.SetMetadata(MetadataNamespace, "status", status)
		f.handle.Log(shared.LogLevelDebug, "eppkit_callout: picker refused with %d", d.Status)
		f.handle.SendLocalResponse(d.Status, [][2]string{{"content-type", "application/json"}, {StatusHeader, status}},
			d.Body, "eppkit_callout_rejected")
		return
	default:
		if f.cfg.FailureModeAllow {
			f.state = stateFailOpen
			f.status = "fail-open: " + headerSafe(d.Detail)
			f.handle.SetMetadata(MetadataNamespace, "status", f.status)
			f.handle.Log(shared.LogLevelWarn, "eppkit_callout: %s; failing open to the pool", d.Detail)
		} else {
			f.state = stateReplied
			f.handle.SetMetadata(MetadataNamespace, "status", "unavailable: "+d.Detail)
			f.handle.Log(shared.LogLevelWarn, "eppkit_callout: %s; failing closed (502)", d.Detail)
			f.handle.SendLocalResponse(502,
				[][2]string{{"content-type", "application/json"}, {StatusHeader, "unavailable"}},
				ErrorBody(502, "the routing service could not pick an endpoint: "+d.Detail, "callout_unavailable"),
				"eppkit_callout_unavailable")
			return
		}
	}
	if !inline {
		f.handle.ContinueRequest()
	}
}

func (f *Filter) endSpan(d Decision, calloutStatus string) {
	if f.span == nil {
		return
	}
	if calloutStatus != "" {
		f.span.SetTag("http.status_code", calloutStatus)
	}
	f.span.SetTag("eppkit.callout.outcome", d.Outcome.String())
	switch d.Outcome {
	case OutcomeRoute:
		f.span.SetTag("eppkit.callout.endpoint", d.Endpoint)
		if d.Prefiller != "" {
			f.span.SetTag("eppkit.callout.prefiller", d.Prefiller)
		}
		if d.Encoders != "" {
			f.span.SetTag("eppkit.callout.encoders", d.Encoders)
		}
	case OutcomeFailure:
		f.span.SetTag("error", "true")
		f.span.SetTag("eppkit.callout.failure", d.Detail)
	}
	f.span.Finish()
	f.span = nil
}

func (f *Filter) OnResponseHeaders(headers shared.HeaderMap, endOfStream bool) shared.HeadersStatus {
	if f.status != "" {
		headers.Set(StatusHeader, f.status)
	}
	return shared.HeadersStatusContinue
}

// OnStreamComplete closes a callout span left open (client went away mid-callout).
func (f *Filter) OnStreamComplete() {
	if f.span != nil {
		f.span.SetTag("eppkit.callout.outcome", "cancelled")
		f.span.Finish()
		f.span = nil
	}
}

func clientTraceparent(headers [][2]string) string {
	for _, kv := range headers {
		if strings.ToLower(kv[0]) == "traceparent" {
			return kv[1]
		}
	}
	return ""
}

// headerSafe keeps a reason printable for a header value.
func headerSafe(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}

// initResults and calloutResults say Envoy's callout results in words; resultName says one, or its number.
var initResults = map[shared.HttpCalloutInitResult]string{
	shared.HttpCalloutInitMissingRequiredHeaders: "missing required headers",
	shared.HttpCalloutInitClusterNotFound:        "cluster not found",
	shared.HttpCalloutInitDuplicateCalloutId:     "duplicate callout id",
	shared.HttpCalloutInitCannotCreateRequest:    "cannot create request (failed at once, e.g. no healthy host)",
}

var calloutResults = map[shared.HttpCalloutResult]string{
	shared.HttpCalloutSuccess:                   "succeeded",
	shared.HttpCalloutReset:                     "was reset",
	shared.HttpCalloutExceedResponseBufferLimit: "answer exceeded the response buffer limit",
}

func resultName[R ~uint32](words map[R]string, r R, unknown string) string {
	if w, ok := words[r]; ok {
		return w
	}
	return unknown + strconv.FormatUint(uint64(r), 10)
}
