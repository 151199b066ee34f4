package callout

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/envoyproxy/envoy/source/extensions/dynamic_modules/sdk/go/shared"
	"github.com/envoyproxy/envoy/source/extensions/dynamic_modules/sdk/go/shared/fake"
	"github.com/envoyproxy/envoy/source/extensions/dynamic_modules/sdk/go/shared/mocks"
	"go.uber.org/mock/gomock"
)

// The filter against the SDK's gomock handle and fake header/body maps: the same calls Envoy
// makes, in the same order, with no Envoy.

const reqBody = `{"model":"mock-llm","messages":[{"role":"user","content":"hi"}]}`

func buf(s string) shared.UnsafeEnvoyBuffer {
	if s == "" {
		return shared.UnsafeEnvoyBuffer{}
	}
	return shared.UnsafeEnvoyBuffer{Ptr: unsafe.StringData(s), Len: uint64(len(s))}
}

func calloutHeaders(kv ...string) [][2]shared.UnsafeEnvoyBuffer {
	var out [][2]shared.UnsafeEnvoyBuffer
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, [2]shared.UnsafeEnvoyBuffer{buf(kv[i]), buf(kv[i+1])})
	}
	return out
}

// fakeSpan records what the filter does with its callout span.
type fakeSpan struct {
	tags     map[string]string
	finished int
}

func (s *fakeSpan) IDs() (string, string) {
	return "0af7651916cd43dd8448eb211c80319c", "00f067aa0ba902b7"
}
func (s *fakeSpan) SetTag(key, value string) { s.tags[key] = value }
func (s *fakeSpan) Finish()                  { s.finished++ }

type rig struct {
	t        *testing.T
	handle   *mocks.MockHttpFilterHandle
	headers  *fake.FakeHeaderMap
	filter   *Filter
	span     *fakeSpan
	metadata map[string]any
	lb       map[string]any // the envoy.lb namespace (the destination Envoy's picked cluster reads)
}

func newRig(t *testing.T, config string) *rig {
	ctrl := gomock.NewController(t)
	handle := mocks.NewMockHttpFilterHandle(ctrl)
	handle.EXPECT().Log(gomock.Any(), gomock.Any(), gomock.Any()).AnyTimes()
	cfg, err := ParseConfig([]byte(config))
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, handle: handle, span: &fakeSpan{tags: map[string]string{}}, metadata: map[string]any{},
		lb: map[string]any{}}
	handle.EXPECT().SetMetadata(MetadataNamespace, gomock.Any(), gomock.Any()).AnyTimes().
		Do(func(_, key string, value any) { r.metadata[key] = value })
	handle.EXPECT().SetMetadata(DefaultLbMetadata, gomock.Any(), gomock.Any()).AnyTimes().
		Do(func(_, key string, value any) { r.lb[key] = value })
	factory := &Factory{Config: cfg, StartSpan: func(shared.HttpFilterHandle) CalloutSpan { return r.span }}
	r.filter = factory.Create(handle).(*Filter)
	r.headers = fake.NewFakeHeaderMap(map[string][]string{
		":method": {"POST"}, ":path": {"/v1/chat/completions"}, ":authority": {"gw"},
		"content-type": {"application/json"}, "traceparent": {validTP},
	})
	return r
}

// sendBody drives headers then a two-chunk body and returns the callout callback Envoy got.
func (r *rig) sendBody(initResult shared.HttpCalloutInitResult) (shared.HttpCalloutCallback, shared.BodyStatus) {
	r.t.Helper()
	if got := r.filter.OnRequestHeaders(r.headers, false); got != shared.HeadersStatusStop {
		r.t.Fatalf("OnRequestHeaders = %v, want Stop (hold the request until the pick)", got)
	}
	first, last := reqBody[:10], reqBody[10:]
	if got := r.filter.OnRequestBody(fake.NewFakeBodyBuffer([]byte(first)), false); got != shared.BodyStatusStopAndBuffer {
		r.t.Fatalf("OnRequestBody(first chunk) = %v, want StopAndBuffer", got)
	}
	r.handle.EXPECT().BufferedRequestBody().Return(fake.NewFakeBodyBuffer([]byte(first))).AnyTimes()
	r.handle.EXPECT().ReceivedRequestBody().Return(fake.NewFakeBodyBuffer([]byte(last))).AnyTimes()
	r.handle.EXPECT().ReceivedBufferedRequestBody().Return(false).AnyTimes()
	var cb shared.HttpCalloutCallback
	r.handle.EXPECT().HttpCallout("callout", gomock.Any(), []byte(reqBody), uint64(1000), gomock.Any()).
		DoAndReturn(func(cluster string, headers [][2]string, body []byte, timeout uint64, c shared.HttpCalloutCallback) (shared.HttpCalloutInitResult, uint64) {
			idx := HeaderIndex(headers)
			// The callout carries its own span's context: same trace as the client, new parent.
			want := "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"
			if idx[":path"] != "/pick" || idx[":method"] != "POST" || idx["traceparent"] != want {
				r.t.Errorf("callout headers %v: want POST /pick with traceparent %s", headers, want)
			}
			cb = c
			return initResult, 7
		})
	status := r.filter.OnRequestBody(fake.NewFakeBodyBuffer([]byte(last)), true)
	return cb, status
}

func (r *rig) response() *fake.FakeHeaderMap {
	resp := fake.NewFakeHeaderMap(map[string][]string{":status": {"200"}})
	r.filter.OnResponseHeaders(resp, false)
	return resp
}

func TestFilter_routesToThePickedEndpoint(t *testing.T) {
	r := newRig(t, `{"cluster": "callout"}`)
	r.headers.Set("x-gateway-destination-endpoint", "127.0.0.1:1") // a client trying to pick for itself
	r.handle.EXPECT().ClearRouteCache().Times(2)                   // after stripping it, after setting the pick
	cb, status := r.sendBody(shared.HttpCalloutInitSuccess)
	if got := r.headers.GetOne("x-gateway-destination-endpoint").ToString(); got != "" {
		t.Fatalf("client-sent destination header survived: %q", got)
	}
	if status != shared.BodyStatusStopAndBuffer {
		t.Fatalf("last chunk: %v, want StopAndBuffer while the callout is in flight", status)
	}

	gomock.InOrder(
		r.handle.EXPECT().RequestHeaders().Return(r.headers),
		r.handle.EXPECT().ContinueRequest(),
	)
	cb.OnHttpCalloutDone(7, shared.HttpCalloutSuccess,
		calloutHeaders(":status", "200", "x-gateway-destination-endpoint", "127.0.0.1:8001,127.0.0.1:8002"),
		[]shared.UnsafeEnvoyBuffer{buf(`{"endpoint":"127.0.0.1:8001","scorer":"kv","reason":"hit"}`)})
	// The primary and its fallback, the same value in the header and in envoy.lb (the GAIE protocol).
	if got := r.headers.GetOne("x-gateway-destination-endpoint").ToString(); got != "127.0.0.1:8001,127.0.0.1:8002" {
		t.Errorf("destination header = %q", got)
	}
	if got := r.lb["x-gateway-destination-endpoint"]; got != "127.0.0.1:8001,127.0.0.1:8002" {
		t.Errorf("envoy.lb metadata = %v", r.lb)
	}
	if r.metadata["endpoint"] != "127.0.0.1:8001" || r.metadata["scorer"] != "kv" || r.metadata["reason"] != "hit" {
		t.Errorf("metadata = %v", r.metadata)
	}
	if got := r.response().GetOne(StatusHeader).ToString(); got != "picked 127.0.0.1:8001" {
		t.Errorf("%s = %q", StatusHeader, got)
	}
	if r.span.finished != 1 || r.span.tags["eppkit.callout.outcome"] != "route" || r.span.tags["http.status_code"] != "200" {
		t.Errorf("span: finished %d, tags %v", r.span.finished, r.span.tags)
	}
}

func TestFilter_copiesThePickedPrefillerAndEncodersOntoTheRequest(t *testing.T) {
	r := newRig(t, `{"cluster": "callout"}`)
	r.headers.Set(PrefillerHeader, "127.0.0.1:1") // a client trying to choose its own prefiller
	r.headers.Set(EncodersHeader, "127.0.0.1:2")
	r.handle.EXPECT().ClearRouteCache().Times(1)
	cb, _ := r.sendBody(shared.HttpCalloutInitSuccess)
	if got := r.headers.GetOne(PrefillerHeader).ToString() + r.headers.GetOne(EncodersHeader).ToString(); got != "" {
		t.Fatalf("client-sent stage headers survived: %q", got)
	}
	gomock.InOrder(
		r.handle.EXPECT().RequestHeaders().Return(r.headers),
		r.handle.EXPECT().ContinueRequest(),
	)
	cb.OnHttpCalloutDone(7, shared.HttpCalloutSuccess,
		calloutHeaders(":status", "200", "x-gateway-destination-endpoint", "127.0.0.1:8001",
			PrefillerHeader, "127.0.0.1:9001", EncodersHeader, "127.0.0.1:7001,127.0.0.1:7002"),
		[]shared.UnsafeEnvoyBuffer{buf(`{"endpoint":"127.0.0.1:8001"}`)})
	if got := r.headers.GetOne(PrefillerHeader).ToString(); got != "127.0.0.1:9001" {
		t.Errorf("%s = %q", PrefillerHeader, got)
	}
	if got := r.headers.GetOne(EncodersHeader).ToString(); got != "127.0.0.1:7001,127.0.0.1:7002" {
		t.Errorf("%s = %q", EncodersHeader, got)
	}
	if r.metadata["prefiller"] != "127.0.0.1:9001" || r.span.tags["eppkit.callout.prefiller"] != "127.0.0.1:9001" {
		t.Errorf("metadata %v, span tags %v", r.metadata, r.span.tags)
	}
}

func TestFilter_passesPickerVerdictsToTheClient(t *testing.T) {
	for _, tt := range []struct {
		status string
		want   uint32
	}{{"503", 503}, {"429", 429}, {"400", 400}} {
		t.Run(tt.status, func(t *testing.T) {
			r := newRig(t, `{"cluster": "callout", "failure_mode_allow": true}`) // a verdict is not a failure
			cb, _ := r.sendBody(shared.HttpCalloutInitSuccess)
			body := `{"error":{"message":"picker says no","type":"X","param":null,"code":` + tt.status + `}}`
			r.handle.EXPECT().SendLocalResponse(tt.want,
				[][2]string{{"content-type", "application/json"}, {StatusHeader, "rejected " + tt.status}},
				[]byte(body), "eppkit_callout_rejected")
			cb.OnHttpCalloutDone(7, shared.HttpCalloutSuccess,
				calloutHeaders(":status", tt.status, "content-type", "application/json"), []shared.UnsafeEnvoyBuffer{buf(body)})
			// A second answer (or a late one) changes nothing.
			cb.OnHttpCalloutDone(7, shared.HttpCalloutSuccess, calloutHeaders(":status", "200"), nil)
			if r.span.tags["eppkit.callout.outcome"] != "reject" || r.span.finished != 1 {
				t.Errorf("span: %v", r.span)
			}
		})
	}
}

func TestFilter_failsClosedWith502WhenThePickerIsDown(t *testing.T) {
	r := newRig(t, `{"cluster": "callout"}`)
	cb, _ := r.sendBody(shared.HttpCalloutInitSuccess)
	r.handle.EXPECT().SendLocalResponse(uint32(502),
		[][2]string{{"content-type", "application/json"}, {StatusHeader, "unavailable"}},
		gomock.Any(), "eppkit_callout_unavailable").
		Do(func(_ uint32, _ [][2]string, body []byte, _ string) {
			for _, want := range []string{"the routing service could not pick an endpoint: callout answered 503: upstream connect error",
				`"code":"callout_unavailable"`, `"type":"BadGatewayError"`} {
				if !strings.Contains(string(body), want) {
					t.Errorf("502 body %s lacks %s", body, want)
				}
			}
		})
	cb.OnHttpCalloutDone(7, shared.HttpCalloutSuccess, calloutHeaders(":status", "503", "content-type", "text/plain"),
		[]shared.UnsafeEnvoyBuffer{buf("upstream connect error or disconnect/reset before headers")})
	if r.span.tags["error"] != "true" {
		t.Errorf("a failed callout's span must be marked error: %v", r.span.tags)
	}
}

func TestFilter_failsOpenToThePoolWhenAllowed(t *testing.T) {
	r := newRig(t, `{"cluster": "callout", "failure_mode_allow": true}`)
	cb, _ := r.sendBody(shared.HttpCalloutInitSuccess)
	r.handle.EXPECT().ContinueRequest()
	cb.OnHttpCalloutDone(7, shared.HttpCalloutReset, nil, nil)
	if got := r.headers.GetOne("x-gateway-destination-endpoint").ToString(); got != "" {
		t.Errorf("fail-open must not set a destination, got %q", got)
	}
	if got := r.response().GetOne(StatusHeader).ToString(); got != "fail-open: callout was reset" {
		t.Errorf("%s = %q", StatusHeader, got)
	}
}

func TestFilter_calloutThatCannotStart(t *testing.T) {
	t.Run("fail closed: 502 at once", func(t *testing.T) {
		r := newRig(t, `{"cluster": "callout"}`)
		r.handle.EXPECT().SendLocalResponse(uint32(502), gomock.Any(), gomock.Any(), "eppkit_callout_unavailable")
		if _, status := r.sendBody(shared.HttpCalloutInitClusterNotFound); status != shared.BodyStatusStopNoBuffer {
			t.Errorf("status = %v, want StopNoBuffer after the local reply", status)
		}
		if r.span.finished != 1 {
			t.Errorf("the span must end with the failed start")
		}
	})
	t.Run("fail open: continue inline, no ContinueRequest", func(t *testing.T) {
		r := newRig(t, `{"cluster": "callout", "failure_mode_allow": true}`)
		if _, status := r.sendBody(shared.HttpCalloutInitCannotCreateRequest); status != shared.BodyStatusContinue {
			t.Errorf("status = %v, want Continue", status)
		}
	})
}

func TestFilter_onlyPOSTIsPicked(t *testing.T) {
	r := newRig(t, `{"cluster": "callout"}`)
	get := fake.NewFakeHeaderMap(map[string][]string{":method": {"GET"}, ":path": {"/v1/models"}})
	if got := r.filter.OnRequestHeaders(get, true); got != shared.HeadersStatusContinue {
		t.Errorf("got %v, want Continue without a callout", got)
	}
	if got := r.response().GetOne(StatusHeader).ToString(); got != "" {
		t.Errorf("an unpicked request carries no %s, got %q", StatusHeader, got)
	}
}

func TestFilter_aPOSTWithoutBodyIsJudgedByThePicker(t *testing.T) {
	r := newRig(t, `{"cluster": "callout"}`)
	r.handle.EXPECT().HttpCallout("callout", gomock.Any(), []byte(nil), uint64(1000), gomock.Any()).
		Return(shared.HttpCalloutInitSuccess, uint64(1))
	if got := r.filter.OnRequestHeaders(r.headers, true); got != shared.HeadersStatusStop {
		t.Errorf("got %v, want Stop while the callout is in flight", got)
	}
}

func TestFilter_trailersEndTheBody(t *testing.T) {
	r := newRig(t, `{"cluster": "callout"}`)
	r.filter.OnRequestHeaders(r.headers, false)
	r.filter.OnRequestBody(fake.NewFakeBodyBuffer([]byte(reqBody)), false)
	r.handle.EXPECT().BufferedRequestBody().Return(fake.NewFakeBodyBuffer([]byte(reqBody)))
	r.handle.EXPECT().HttpCallout("callout", gomock.Any(), []byte(reqBody), uint64(1000), gomock.Any()).
		Return(shared.HttpCalloutInitSuccess, uint64(1))
	if got := r.filter.OnRequestTrailers(fake.NewFakeHeaderMap(map[string][]string{})); got != shared.TrailersStatusStop {
		t.Errorf("got %v, want Stop", got)
	}
}

func TestFilter_withoutASpanTheClientTraceparentIsForwarded(t *testing.T) {
	r := newRig(t, `{"cluster": "callout"}`)
	r.filter.startSpan = func(shared.HttpFilterHandle) CalloutSpan { return nil } // tracing off
	r.handle.EXPECT().HttpCallout("callout", gomock.Any(), gomock.Any(), gomock.Any(), gomock.Any()).
		DoAndReturn(func(_ string, headers [][2]string, _ []byte, _ uint64, _ shared.HttpCalloutCallback) (shared.HttpCalloutInitResult, uint64) {
			if got := HeaderIndex(headers)["traceparent"]; got != validTP {
				t.Errorf("traceparent = %q, want the client's %q", got, validTP)
			}
			return shared.HttpCalloutInitSuccess, 1
		})
	r.filter.OnRequestHeaders(r.headers, true)
}

func TestFilter_streamEndingMidCalloutClosesTheSpan(t *testing.T) {
	r := newRig(t, `{"cluster": "callout"}`)
	r.sendBody(shared.HttpCalloutInitSuccess)
	r.filter.OnStreamComplete()
	if r.span.finished != 1 || r.span.tags["eppkit.callout.outcome"] != "cancelled" {
		t.Errorf("span: %+v", r.span)
	}
}

func TestConfigFactory_reportsBadConfig(t *testing.T) {
	ctrl := gomock.NewController(t)
	handle := mocks.NewMockHttpFilterConfigHandle(ctrl)
	handle.EXPECT().Log(shared.LogLevelError, gomock.Any(), gomock.Any())
	if _, err := (ConfigFactory{}).Create(handle, []byte(`{}`)); err == nil {
		t.Error("a config without cluster must be refused")
	}
}

func TestResultNamesSayEnvoysResultInWordsOrItsNumber(t *testing.T) {
	if got := resultName(initResults, shared.HttpCalloutInitClusterNotFound, "init result "); got != "cluster not found" {
		t.Errorf("init result in words: %q", got)
	}
	if got := resultName(calloutResults, shared.HttpCalloutResult(99), "failed with result "); got != "failed with result 99" {
		t.Errorf("an unknown callout result: %q", got)
	}
}
