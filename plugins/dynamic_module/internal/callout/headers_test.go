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

func TestTraceparent(t *testing.T) {
	for _, tt := range []struct {
		name, traceID, spanID, client, want string
	}{
		{"Envoy's ids, sampled by default", "0af7651916cd43dd8448eb211c80319c", "00f067aa0ba902b7", "",
			"00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"},
		{"client's flags kept", "0af7651916cd43dd8448eb211c80319c", "00f067aa0ba902b7",
			"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
			"00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-00"},
		{"64-bit trace id is left-padded", "8448eb211c80319c", "f067aa0ba902b7", "",
			"00-00000000000000008448eb211c80319c-00f067aa0ba902b7-01"},
		{"upper-case hex is lowered", "0AF7651916CD43DD8448EB211C80319C", "00F067AA0BA902B7", "",
			"00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"},
		{"no ids: none", "", "", validTP, ""},
		{"not hex: none", "zzz", "00f067aa0ba902b7", "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Traceparent(tt.traceID, tt.spanID, tt.client); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

var clientRequest = [][2]string{
	{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "gw"}, {":scheme", "http"},
	{"content-type", "application/json"}, {"content-length", "64"}, {"authorization", "Bearer secret"},
	{"traceparent", validTP}, {"tracestate", "vendor=1"},
	{"x-gateway-model-name", "m"}, {"x-eppkit-force-endpoint", "127.0.0.1:8001"},
	{"x-request-id", "r1"}, {"x-envoy-expected-rq-timeout-ms", "15000"},
	{"x-gateway-destination-endpoint", "127.0.0.1:1"}, {"connection", "keep-alive"},
}

func TestCalloutHeaders_forwardsTheContractHeadersAndTheClientTraceContext(t *testing.T) {
	cfg, _ := ParseConfig([]byte(`{"cluster": "callout"}`))
	got := CalloutHeaders(cfg, clientRequest, "")
	want := [][2]string{
		{":method", "POST"}, {":path", "/pick"}, {":authority", "callout"},
		{"content-type", "application/json"}, {"traceparent", validTP},
		{"tracestate", "vendor=1"}, {"x-gateway-model-name", "m"},
		{"x-eppkit-force-endpoint", "127.0.0.1:8001"}, {"x-request-id", "r1"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
}

func TestCalloutHeaders_forwardsTheConfiguredHeaders(t *testing.T) {
	cfg, _ := ParseConfig([]byte(`{"cluster": "callout", "forward_headers": ["Test-EPP-Endpoint-Selection"]}`))
	request := append([][2]string{{"test-epp-endpoint-selection", "127.0.0.2"}}, clientRequest...)
	idx := HeaderIndex(CalloutHeaders(cfg, request, ""))
	if idx["test-epp-endpoint-selection"] != "127.0.0.2" {
		t.Errorf("forward_headers not forwarded: %v", idx)
	}
	if _, ok := HeaderIndex(CalloutHeaders(cfg, clientRequest, ""))["authorization"]; ok {
		t.Errorf("a header outside the contract and forward_headers was forwarded")
	}
}

func TestCalloutHeaders_theCalloutSpanIsTheParentWhenThereIsOne(t *testing.T) {
	cfg, _ := ParseConfig([]byte(`{"cluster": "callout"}`))
	own := "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"
	idx := HeaderIndex(CalloutHeaders(cfg, clientRequest, own))
	if idx["traceparent"] != own || idx["tracestate"] != "vendor=1" {
		t.Errorf("got %v", idx)
	}
}

func TestCalloutHeaders_dropsInvalidTraceContext(t *testing.T) {
	cfg, _ := ParseConfig([]byte(`{"cluster": "callout"}`))
	got := CalloutHeaders(cfg, [][2]string{{"traceparent", "garbage"}, {"tracestate", "vendor=1"}}, "")
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
