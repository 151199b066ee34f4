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

type rig struct {
	t       *testing.T
	handle  *mocks.MockHttpFilterHandle
	headers *fake.FakeHeaderMap
	filter  *Filter
}

func newRig(t *testing.T, config string) *rig {
	ctrl := gomock.NewController(t)
	handle := mocks.NewMockHttpFilterHandle(ctrl)
	handle.EXPECT().Log(gomock.Any(), gomock.Any(), gomock.Any()).AnyTimes()
	cfg, err := ParseConfig([]byte(config))
	if err != nil {
		t.Fatal(err)
	}
	f := (&Factory{Config: cfg}).Create(handle).(*Filter)
	headers := fake.NewFakeHeaderMap(map[string][]string{
		":method": {"POST"}, ":path": {"/v1/chat/completions"}, ":authority": {"gw"},
		"content-type": {"application/json"}, "traceparent": {validTP},
	})
	return &rig{t: t, handle: handle, headers: headers, filter: f}
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
	r.handle.EXPECT().HttpCallout("callout", gomock.Any(), []byte(reqBody), uint64(5000), gomock.Any()).
		DoAndReturn(func(cluster string, headers [][2]string, body []byte, timeout uint64, c shared.HttpCalloutCallback) (shared.HttpCalloutInitResult, uint64) {
			idx := HeaderIndex(headers)
			if idx[":path"] != "/pick" || idx[":method"] != "POST" || idx["traceparent"] != validTP {
				r.t.Errorf("callout headers %v: want POST /pick with the client's traceparent", headers)
			}
			cb = c
			return initResult, 7
		})
	status := r.filter.OnRequestBody(fake.NewFakeBodyBuffer([]byte(last)), true)
	return cb, status
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
		r.handle.EXPECT().SetMetadata(MetadataNamespace, "endpoint", "127.0.0.1:8001"),
		r.handle.EXPECT().SetMetadata(MetadataNamespace, "scorer", "kv"),
		r.handle.EXPECT().SetMetadata(MetadataNamespace, "reason", "hit"),
		r.handle.EXPECT().ContinueRequest(),
	)
	cb.OnHttpCalloutDone(7, shared.HttpCalloutSuccess,
		calloutHeaders(":status", "200", "x-gateway-destination-endpoint", "127.0.0.1:8001"),
		[]shared.UnsafeEnvoyBuffer{buf(`{"endpoint":"127.0.0.1:8001","scorer":"kv","reason":"hit"}`)})
	if got := r.headers.GetOne("x-gateway-destination-endpoint").ToString(); got != "127.0.0.1:8001" {
		t.Errorf("destination header = %q", got)
	}
	resp := fake.NewFakeHeaderMap(map[string][]string{":status": {"200"}})
	r.filter.OnResponseHeaders(resp, false)
	if len(resp.Get(ResponseHeader)) != 0 {
		t.Errorf("a picked request must not be marked fail-open")
	}
}

func TestFilter_passesPickerRefusalsToTheClient(t *testing.T) {
	for _, tt := range []struct {
		status string
		want   uint32
	}{{"503", 503}, {"429", 429}, {"400", 400}} {
		t.Run(tt.status, func(t *testing.T) {
			r := newRig(t, `{"cluster": "callout", "failure_mode_allow": true}`) // a refusal is not a failure
			cb, _ := r.sendBody(shared.HttpCalloutInitSuccess)
			body := `{"error":{"message":"picker says no","type":"X","param":null,"code":` + tt.status + `}}`
			r.handle.EXPECT().SendLocalResponse(tt.want, [][2]string{{"content-type", "application/json"}}, []byte(body), "eppkit_callout_refused")
			cb.OnHttpCalloutDone(7, shared.HttpCalloutSuccess, calloutHeaders(":status", tt.status), []shared.UnsafeEnvoyBuffer{buf(body)})
			// A second answer (or a late one) changes nothing.
			cb.OnHttpCalloutDone(7, shared.HttpCalloutSuccess, calloutHeaders(":status", "200"), nil)
		})
	}
}

func TestFilter_failsClosedWith502WhenThePickerIsDown(t *testing.T) {
	r := newRig(t, `{"cluster": "callout"}`)
	cb, _ := r.sendBody(shared.HttpCalloutInitSuccess)
	r.handle.EXPECT().SendLocalResponse(uint32(502), gomock.Any(), gomock.Any(), "eppkit_callout_failed").
		Do(func(_ uint32, _ [][2]string, body []byte, _ string) {
			if !strings.Contains(string(body), "endpoint picker unavailable: callout answered 503: upstream connect error") {
				t.Errorf("502 body does not say why: %s", body)
			}
		})
	cb.OnHttpCalloutDone(7, shared.HttpCalloutSuccess, calloutHeaders(":status", "503"),
		[]shared.UnsafeEnvoyBuffer{buf("upstream connect error or disconnect/reset before headers")})
}

func TestFilter_failsOpenToThePoolWhenAllowed(t *testing.T) {
	r := newRig(t, `{"cluster": "callout", "failure_mode_allow": true}`)
	cb, _ := r.sendBody(shared.HttpCalloutInitSuccess)
	r.handle.EXPECT().SetMetadata(MetadataNamespace, "failure", "callout was reset")
	r.handle.EXPECT().ContinueRequest()
	cb.OnHttpCalloutDone(7, shared.HttpCalloutReset, nil, nil)
	if got := r.headers.GetOne("x-gateway-destination-endpoint").ToString(); got != "" {
		t.Errorf("fail-open must not set a destination, got %q", got)
	}
	resp := fake.NewFakeHeaderMap(map[string][]string{":status": {"200"}})
	r.filter.OnResponseHeaders(resp, false)
	if got := resp.GetOne(ResponseHeader).ToString(); got != "fail-open" {
		t.Errorf("%s = %q, want fail-open", ResponseHeader, got)
	}
}

func TestFilter_calloutThatCannotStart(t *testing.T) {
	t.Run("fail closed: 502 at once", func(t *testing.T) {
		r := newRig(t, `{"cluster": "callout"}`)
		r.handle.EXPECT().SendLocalResponse(uint32(502), gomock.Any(), gomock.Any(), "eppkit_callout_failed")
		if _, status := r.sendBody(shared.HttpCalloutInitClusterNotFound); status != shared.BodyStatusStopNoBuffer {
			t.Errorf("status = %v, want StopNoBuffer after the local reply", status)
		}
	})
	t.Run("fail open: continue inline, no ContinueRequest", func(t *testing.T) {
		r := newRig(t, `{"cluster": "callout", "failure_mode_allow": true}`)
		r.handle.EXPECT().SetMetadata(MetadataNamespace, "failure", gomock.Any())
		if _, status := r.sendBody(shared.HttpCalloutInitCannotCreateRequest); status != shared.BodyStatusContinue {
			t.Errorf("status = %v, want Continue", status)
		}
	})
}

func TestFilter_bodylessRequestsGoToThePoolUnpicked(t *testing.T) {
	r := newRig(t, `{"cluster": "callout"}`)
	get := fake.NewFakeHeaderMap(map[string][]string{":method": {"GET"}, ":path": {"/v1/models"}})
	if got := r.filter.OnRequestHeaders(get, true); got != shared.HeadersStatusContinue {
		t.Errorf("got %v, want Continue without a callout", got)
	}
}

func TestFilter_bodylessRequestsArePickedWhenAsked(t *testing.T) {
	r := newRig(t, `{"cluster": "callout", "skip_bodyless": false}`)
	r.handle.EXPECT().HttpCallout("callout", gomock.Any(), []byte(nil), uint64(5000), gomock.Any()).
		Return(shared.HttpCalloutInitSuccess, uint64(1))
	get := fake.NewFakeHeaderMap(map[string][]string{":method": {"GET"}, ":path": {"/v1/models"}})
	if got := r.filter.OnRequestHeaders(get, true); got != shared.HeadersStatusStop {
		t.Errorf("got %v, want Stop while the callout is in flight", got)
	}
}

func TestFilter_trailersEndTheBody(t *testing.T) {
	r := newRig(t, `{"cluster": "callout"}`)
	r.filter.OnRequestHeaders(r.headers, false)
	r.filter.OnRequestBody(fake.NewFakeBodyBuffer([]byte(reqBody)), false)
	r.handle.EXPECT().BufferedRequestBody().Return(fake.NewFakeBodyBuffer([]byte(reqBody)))
	r.handle.EXPECT().HttpCallout("callout", gomock.Any(), []byte(reqBody), uint64(5000), gomock.Any()).
		Return(shared.HttpCalloutInitSuccess, uint64(1))
	if got := r.filter.OnRequestTrailers(fake.NewFakeHeaderMap(map[string][]string{})); got != shared.TrailersStatusStop {
		t.Errorf("got %v, want Stop", got)
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
