package callout

import (
	"strconv"

	"github.com/envoyproxy/envoy/source/extensions/dynamic_modules/sdk/go/shared"
	"github.com/envoyproxy/envoy/source/extensions/dynamic_modules/sdk/go/shared/utility"
)

// FilterName is the filter_name Envoy's DynamicModuleFilter config uses for this filter.
const FilterName = "eppkit_callout"

// MetadataNamespace holds endpoint/scorer/reason of the pick as dynamic metadata, for access
// logs (%DYNAMIC_METADATA(eppkit.callout:endpoint)%).
const MetadataNamespace = "eppkit.callout"

// ResponseHeader is added to the client's response when the filter failed open, so tests and
// people can tell a pool-routed fallback from a pick.
const ResponseHeader = "x-eppkit-callout"

// ConfigFactory parses the filter_config once per Envoy filter config.
type ConfigFactory struct{}

func (ConfigFactory) Create(handle shared.HttpFilterConfigHandle, raw []byte) (shared.HttpFilterFactory, error) {
	cfg, err := ParseConfig(raw)
	if err != nil {
		handle.Log(shared.LogLevelError, "%v", err)
		return nil, err
	}
	handle.Log(shared.LogLevelInfo, "eppkit_callout: cluster=%s path=%s timeout_ms=%d failure_mode_allow=%t",
		cfg.Cluster, cfg.Path, cfg.TimeoutMs, cfg.FailureModeAllow)
	return &Factory{Config: cfg}, nil
}

func (ConfigFactory) CreatePerRoute(raw []byte) (any, error) { return nil, nil }

// Factory makes one Filter per request.
type Factory struct {
	shared.EmptyHttpFilterFactory
	Config *Config
}

func (f *Factory) Create(handle shared.HttpFilterHandle) shared.HttpFilter {
	return &Filter{handle: handle, cfg: f.Config}
}

type state int

const (
	stateStart     state = iota
	stateAwaitBody       // headers seen, buffering the body
	stateCalling         // callout in flight, request held
	stateRouted          // destination set, request continued
	stateFailOpen        // callout failed, request continued to the pool
	stateReplied         // local reply sent (reject or fail closed)
	stateSkipped         // bodiless request, not picked
)

// Filter holds one request until the picker answers.
type Filter struct {
	shared.EmptyHttpFilter
	handle  shared.HttpFilterHandle
	cfg     *Config
	state   state
	headers [][2]string // copy of the client's request headers, for the callout
}

func (f *Filter) OnRequestHeaders(headers shared.HeaderMap, endOfStream bool) shared.HeadersStatus {
	// The destination is the picker's to set: a client-sent one would bypass it.
	if len(headers.Get(f.cfg.DestinationHeader)) > 0 {
		headers.Remove(f.cfg.DestinationHeader)
		f.handle.ClearRouteCache()
	}
	all := headers.GetAll()
	f.headers = make([][2]string, 0, len(all))
	for _, kv := range all {
		f.headers = append(f.headers, [2]string{kv[0].ToString(), kv[1].ToString()})
	}
	if endOfStream && *f.cfg.SkipBodyless {
		f.state = stateSkipped
		return shared.HeadersStatusContinue
	}
	if endOfStream {
		f.state = stateCalling
		if f.startCallout(nil) {
			return shared.HeadersStatusStop
		}
		if f.state == stateReplied {
			return shared.HeadersStatusStop
		}
		return shared.HeadersStatusContinue
	}
	f.state = stateAwaitBody
	return shared.HeadersStatusStop
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
	result, _ := f.handle.HttpCallout(f.cfg.Cluster, CalloutHeaders(f.cfg, f.headers), body, f.cfg.TimeoutMs, f)
	if result == shared.HttpCalloutInitSuccess {
		return true
	}
	f.apply(Decision{Outcome: OutcomeFailure, Detail: "callout could not start: " + initResultName(result)}, true)
	return false
}

// OnHttpCalloutDone is the picker's answer (shared.HttpCalloutCallback).
func (f *Filter) OnHttpCalloutDone(_ uint64, result shared.HttpCalloutResult,
	headers [][2]shared.UnsafeEnvoyBuffer, body []shared.UnsafeEnvoyBuffer) {
	if f.state != stateCalling {
		return
	}
	resp := Response{Completed: result == shared.HttpCalloutSuccess, FailureReason: calloutResultName(result)}
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
	f.apply(Decide(f.cfg, resp), false)
}

// apply carries out a decision. inline is true inside OnRequest* (the return status continues
// the request), false in the callout callback (ContinueRequest does).
func (f *Filter) apply(d Decision, inline bool) {
	switch d.Outcome {
	case OutcomeRoute:
		f.handle.RequestHeaders().Set(f.cfg.DestinationHeader, d.Endpoint)
		f.handle.SetMetadata(MetadataNamespace, "endpoint", d.Endpoint)
		if d.Scorer != "" {
			f.handle.SetMetadata(MetadataNamespace, "scorer", d.Scorer)
		}
		if d.Reason != "" {
			f.handle.SetMetadata(MetadataNamespace, "reason", d.Reason)
		}
		f.handle.ClearRouteCache()
		f.state = stateRouted
		f.handle.Log(shared.LogLevelDebug, "eppkit_callout: picked %s (scorer=%s reason=%s)", d.Endpoint, d.Scorer, d.Reason)
	case OutcomeReject:
		f.state = stateReplied
		f.handle.Log(shared.LogLevelDebug, "eppkit_callout: picker refused with %d", d.Status)
		f.handle.SendLocalResponse(d.Status, jsonHeaders(), d.Body, "eppkit_callout_refused")
		return
	default:
		if f.cfg.FailureModeAllow {
			f.state = stateFailOpen
			f.handle.SetMetadata(MetadataNamespace, "failure", d.Detail)
			f.handle.Log(shared.LogLevelWarn, "eppkit_callout: %s; failing open to the pool", d.Detail)
		} else {
			f.state = stateReplied
			f.handle.Log(shared.LogLevelWarn, "eppkit_callout: %s; failing closed (502)", d.Detail)
			f.handle.SendLocalResponse(502, jsonHeaders(),
				ErrorBody(502, "endpoint picker unavailable: "+d.Detail), "eppkit_callout_failed")
			return
		}
	}
	if !inline {
		f.handle.ContinueRequest()
	}
}

func (f *Filter) OnResponseHeaders(headers shared.HeaderMap, endOfStream bool) shared.HeadersStatus {
	if f.state == stateFailOpen {
		headers.Set(ResponseHeader, "fail-open")
	}
	return shared.HeadersStatusContinue
}

func jsonHeaders() [][2]string {
	return [][2]string{{"content-type", "application/json"}}
}

func initResultName(r shared.HttpCalloutInitResult) string {
	switch r {
	case shared.HttpCalloutInitMissingRequiredHeaders:
		return "missing required headers"
	case shared.HttpCalloutInitClusterNotFound:
		return "cluster not found"
	case shared.HttpCalloutInitDuplicateCalloutId:
		return "duplicate callout id"
	case shared.HttpCalloutInitCannotCreateRequest:
		return "cannot create request (failed at once, e.g. no healthy host)"
	default:
		return "init result " + strconv.Itoa(int(r))
	}
}

func calloutResultName(r shared.HttpCalloutResult) string {
	switch r {
	case shared.HttpCalloutSuccess:
		return "succeeded"
	case shared.HttpCalloutReset:
		return "was reset"
	case shared.HttpCalloutExceedResponseBufferLimit:
		return "answer exceeded the response buffer limit"
	default:
		return "failed with result " + strconv.Itoa(int(r))
	}
}
