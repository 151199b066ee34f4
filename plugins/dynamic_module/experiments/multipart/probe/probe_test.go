package probe

import (
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/envoyproxy/envoy/source/extensions/dynamic_modules/sdk/go/shared"
	"github.com/envoyproxy/envoy/source/extensions/dynamic_modules/sdk/go/shared/fake"
	"github.com/envoyproxy/envoy/source/extensions/dynamic_modules/sdk/go/shared/mocks"
	"go.uber.org/mock/gomock"
)

const marker = "--B\r\nContent-Disposition: form-data; name=\"metadata\""

var body = "--B\r\nContent-Disposition: form-data; name=\"request_payload\"\r\n\r\n{\"prompt\":\"hi\"}\r\n" +
	marker + "\r\n\r\n{\"kv\":1}\r\n--B--\r\n"

func b(s string) shared.UnsafeEnvoyBuffer {
	return shared.UnsafeEnvoyBuffer{Ptr: unsafe.StringData(s), Len: uint64(len(s))}
}

func TestSplit(t *testing.T) {
	p1, p2 := Split([]byte(body), marker)
	if !strings.HasSuffix(string(p1), "{\"prompt\":\"hi\"}\r\n") || !strings.HasPrefix(string(p2), marker) ||
		string(p1)+string(p2) != body {
		t.Errorf("bad split: %q | %q", p1, p2)
	}
	p1, p2 = Split([]byte("no marker"), marker)
	if string(p1) != "no marker" || p2 != nil {
		t.Errorf("without a marker everything is part 1: %q | %q", p1, p2)
	}
}

func TestParseConfig(t *testing.T) {
	if _, err := ParseConfig([]byte(`{"cluster":"c"}`)); err == nil {
		t.Error("split_marker is required")
	}
	if _, err := ParseConfig([]byte(`{"cluster":"c","split_marker":"x","inject_after":"never"}`)); err == nil {
		t.Error("inject_after must be validated")
	}
	cfg, err := ParseConfig([]byte(`{"cluster":"c","split_marker":"x"}`))
	if err != nil || cfg.InjectAfter != "headers" {
		t.Errorf("default inject_after: %+v %v", cfg, err)
	}
}

// The two-phase order on the SDK's mock handle: part 1 with end_of_stream=false, response
// headers to the client, then part 2 with end_of_stream=true from a scheduled callback.
func TestProbe_injectsPart2AfterResponseHeaders(t *testing.T) {
	ctrl := gomock.NewController(t)
	h := mocks.NewMockHttpFilterHandle(ctrl)
	sched := mocks.NewMockScheduler(ctrl)
	h.EXPECT().Log(gomock.Any(), gomock.Any(), gomock.Any()).AnyTimes()
	cfg, _ := ParseConfig([]byte(`{"cluster":"backend","split_marker":` + jsonString(marker) + `}`))
	p := (&Factory{cfg: cfg}).Create(h).(*Probe)
	clock := time.Unix(0, 0)
	p.now = func() time.Time { clock = clock.Add(time.Millisecond); return clock }

	reqHeaders := fake.NewFakeHeaderMap(map[string][]string{":method": {"POST"}, ":path": {"/v1/completions"},
		":authority": {"gw"}, "connection": {"keep-alive"}})
	if got := p.OnRequestHeaders(reqHeaders, false); got != shared.HeadersStatusStop {
		t.Fatalf("headers: %v", got)
	}
	h.EXPECT().BufferedRequestBody().Return(fake.NewFakeBodyBuffer(nil))
	h.EXPECT().ReceivedRequestBody().Return(fake.NewFakeBodyBuffer([]byte(body)))
	h.EXPECT().ReceivedBufferedRequestBody().Return(false)
	h.EXPECT().GetScheduler().Return(sched)
	part1, part2 := Split([]byte(body), marker)

	var scheduled func()
	gomock.InOrder(
		h.EXPECT().StartHttpStream("backend", gomock.Any(), part1, false, uint64(0), p).
			DoAndReturn(func(_ string, hs [][2]string, _ []byte, _ bool, _ uint64, _ shared.HttpStreamCallback) (shared.HttpCalloutInitResult, uint64) {
				for _, kv := range hs {
					if kv[0] == "connection" {
						t.Errorf("hop-by-hop header forwarded: %v", hs)
					}
				}
				return shared.HttpCalloutInitSuccess, 3
			}),
		sched.EXPECT().Schedule(gomock.Any()).Do(func(f func()) { scheduled = f }),
		h.EXPECT().SendResponseHeaders(gomock.Any(), false),
		h.EXPECT().SendHttpStreamData(uint64(3), part2, true).Return(true),
		h.EXPECT().SendResponseData([]byte("tok"), false),
		h.EXPECT().SendResponseData([]byte("en"), false),
		h.EXPECT().SendResponseTrailers(gomock.Any()).Do(func(tr [][2]string) {
			if tr[0][0] != EvidenceHeader || !strings.Contains(tr[0][1], "part2_sent_after_headers") {
				t.Errorf("evidence trailer: %v", tr)
			}
		}),
	)
	if got := p.OnRequestBody(fake.NewFakeBodyBuffer([]byte(body)), true); got != shared.BodyStatusStopNoBuffer {
		t.Fatalf("body: %v", got)
	}
	p.OnHttpStreamHeaders(3, [][2]shared.UnsafeEnvoyBuffer{{b(":status"), b("200")}}, false)
	if scheduled == nil {
		t.Fatal("part 2 was not scheduled after the response headers")
	}
	scheduled()
	p.OnHttpStreamData(3, []shared.UnsafeEnvoyBuffer{b("tok")}, false)
	p.OnHttpStreamData(3, []shared.UnsafeEnvoyBuffer{b("en")}, true)
	p.OnHttpStreamComplete(3)
	if !strings.Contains(strings.Join(p.events, " "), "part1_sent") {
		t.Errorf("events: %v", p.events)
	}
}

func TestProbe_upstreamResetBeforeHeadersIs502(t *testing.T) {
	ctrl := gomock.NewController(t)
	h := mocks.NewMockHttpFilterHandle(ctrl)
	h.EXPECT().Log(gomock.Any(), gomock.Any(), gomock.Any()).AnyTimes()
	cfg, _ := ParseConfig([]byte(`{"cluster":"backend","split_marker":"x"}`))
	p := (&Factory{cfg: cfg}).Create(h).(*Probe)
	h.EXPECT().SendLocalResponse(uint32(502), gomock.Any(), gomock.Any(), "eppkit_multipart_upstream_reset")
	p.OnHttpStreamReset(1, shared.HttpStreamResetReasonConnectionFailure)
}

func jsonString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\r", `\r`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}
