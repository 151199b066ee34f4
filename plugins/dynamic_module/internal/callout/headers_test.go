package callout

import (
	"reflect"
	"testing"
)

const validTP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

func TestValidTraceparent(t *testing.T) {
	for _, tt := range []struct {
		v  string
		ok bool
	}{
		{validTP, true},
		{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", true},
		{"00-00000000000000000000000000000000-b7ad6b7169203331-01", false}, // zero trace id
		{"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", false}, // zero parent id
		{"ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", false}, // forbidden version
		{"00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01", false}, // upper case
		{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331", false},
		{"", false},
	} {
		if got := ValidTraceparent(tt.v); got != tt.ok {
			t.Errorf("ValidTraceparent(%q) = %t, want %t", tt.v, got, tt.ok)
		}
	}
}

func TestCalloutHeaders_forwardsClientHeadersAndTraceContext(t *testing.T) {
	cfg, _ := ParseConfig([]byte(`{"cluster": "callout"}`))
	got := CalloutHeaders(cfg, [][2]string{
		{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "gw"}, {":scheme", "http"},
		{"content-type", "application/json"}, {"content-length", "64"},
		{"traceparent", validTP}, {"tracestate", "vendor=1"},
		{"x-gateway-model-name", "m"}, {"x-eppkit-force-endpoint", "127.0.0.1:8001"},
		{"x-request-id", "r1"}, {"x-envoy-expected-rq-timeout-ms", "15000"},
		{"x-gateway-destination-endpoint", "127.0.0.1:1"}, {"connection", "keep-alive"},
	})
	want := [][2]string{
		{":method", "POST"}, {":path", "/pick"}, {":authority", "callout"},
		{"content-type", "application/json"},
		{"traceparent", validTP}, {"tracestate", "vendor=1"},
		{"x-gateway-model-name", "m"}, {"x-eppkit-force-endpoint", "127.0.0.1:8001"},
		{"x-request-id", "r1"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
}

func TestCalloutHeaders_dropsInvalidTraceContext(t *testing.T) {
	cfg, _ := ParseConfig([]byte(`{"cluster": "callout"}`))
	got := CalloutHeaders(cfg, [][2]string{{"traceparent", "garbage"}, {"tracestate", "vendor=1"}})
	want := [][2]string{{":method", "POST"}, {":path", "/pick"}, {":authority", "callout"}, {"content-type", "application/json"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestHeaderIndex_firstValueWinsAndNamesAreLowerCase(t *testing.T) {
	got := HeaderIndex([][2]string{{":status", "200"}, {"X-A", "1"}, {"x-a", "2"}})
	if got[":status"] != "200" || got["x-a"] != "1" || len(got) != 2 {
		t.Errorf("got %v", got)
	}
}
