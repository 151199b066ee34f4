// Command load is the kit's native load client: it sends planned requests through a gateway with a fixed number in
// flight, on HTTP/1.1 and h2c, and writes one JSON line per finished request, so a verdict that sends thousands of
// requests (the EPP verdict's sustained-load check) spends the machine's CPU on the EPP it judges, not on its client.
// The sending is vegeta's (github.com/tsenart/vegeta: its attacker, its workers, its reading of each answer); what
// is here is the plan in, which planned request each answer belongs to, and whether the answer came whole.
//
//	load -url http://127.0.0.1:P/v1/chat/completions -requests plan.jsonl -concurrency 32 -timeout 30s \
//	     -max-duration 120s
//
// plan.jsonl: one request a line, {"index": 0, "protocol": "http/1.1" | "h2c", "traceparent": "00-…-…-01",
// "body": "<the JSON body, as text>", "stream": false, "headers": {"name": "value"}}. On stdout, one line a finished request: {"index", "status",
// "error" (null, or timeout | connection | stream_broken | http_<status> | stream_incomplete | empty_answer),
// "detail", "sent_s", "e2e_ms", "pod"}; the last line {"done": true, "stopped": "<why it stopped early, or empty>"}.
// SIGTERM or SIGINT: no more requests are sent; those in flight finish, each bounded by -timeout.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
	"golang.org/x/net/http2"
)

const (
	h2c      = "h2c"
	seqKey   = "X-Vegeta-Seq" // vegeta numbers each hit in this request header
	doneLine = "data: [DONE]"
	podKey   = "X-Inference-Pod"
	maxShown = 300 // bytes of a failed answer or error shown
)

type planned struct {
	Index       int               `json:"index"`
	Protocol    string            `json:"protocol"`
	Traceparent string            `json:"traceparent"`
	Body        string            `json:"body"`
	Stream      bool              `json:"stream"`
	Headers     map[string]string `json:"headers,omitempty"` // beside content-type and traceparent
}

type outcome struct {
	Index  int     `json:"index"`
	Status int     `json:"status"`
	Error  *string `json:"error"`
	Detail *string `json:"detail"`
	SentS  float64 `json:"sent_s"`
	E2eMs  float64 `json:"e2e_ms"`
	Pod    string  `json:"pod,omitempty"`
}

// identified pairs vegeta's number of a hit with the planned request it sent. A hit takes its number before its
// target, so the two meet only where the request leaves: in the transport.
type identified struct {
	next    http.RoundTripper
	mu      sync.Mutex
	bySeq   map[string]*planned
	byTrace map[string]*planned
}

func (t *identified) RoundTrip(req *http.Request) (*http.Response, error) {
	t.mu.Lock()
	t.bySeq[req.Header.Get(seqKey)] = t.byTrace[req.Header.Get("traceparent")]
	t.mu.Unlock()
	return t.next.RoundTrip(req)
}

func (t *identified) of(res *vegeta.Result) *planned {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.bySeq[strconv.FormatUint(res.Seq, 10)]
}

// lane is one protocol's attacker, its transport and its share of the plan.
type lane struct {
	attacker *vegeta.Attacker
	ids      *identified
	plan     []*planned
}

func newLane(protocol string, plan []*planned, workers int, timeout time.Duration) *lane {
	var next http.RoundTripper = &http.Transport{MaxIdleConnsPerHost: workers, DisableCompression: true,
		ForceAttemptHTTP2: false, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}
	if protocol == h2c { // HTTP/2 over cleartext, with prior knowledge (as the kit's Python client speaks it)
		next = &http2.Transport{AllowHTTP: true, DisableCompression: true,
			DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			}}
	}
	ids := &identified{next: next, bySeq: map[string]*planned{}, byTrace: map[string]*planned{}}
	for _, p := range plan {
		ids.byTrace[p.Traceparent] = p
	}
	client := &http.Client{Transport: ids, Timeout: timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	attacker := vegeta.NewAttacker(vegeta.Client(client), vegeta.Workers(uint64(workers)),
		vegeta.MaxWorkers(uint64(workers)))
	return &lane{attacker: attacker, ids: ids, plan: plan}
}

// targeter hands out the lane's plan once, in order; then vegeta's end of targets stops the lane.
func (l *lane) targeter(url string) vegeta.Targeter {
	var mu sync.Mutex
	next := 0
	return func(t *vegeta.Target) error {
		mu.Lock()
		defer mu.Unlock()
		if next >= len(l.plan) {
			return vegeta.ErrNoTargets
		}
		p := l.plan[next]
		next++
		t.Method, t.URL, t.Body = http.MethodPost, url, []byte(p.Body)
		t.Header = http.Header{"Content-Type": {"application/json"}}
		for name, value := range p.Headers {
			t.Header.Set(name, value)
		}
		t.Header.Set("Traceparent", p.Traceparent) // each request's own: its answer is told by it
		return nil
	}
}

// judge says what became of one request: nil when it was served 200 with its whole answer.
func judge(p *planned, res *vegeta.Result) (status int, kind, detail *string) {
	text := func(s string) *string {
		if len(s) > maxShown {
			s = s[:maxShown]
		}
		return &s
	}
	status = int(res.Code)
	switch {
	case res.Code == 0 && res.Error != "":
		err := strings.ToLower(res.Error)
		k := "connection"
		if strings.Contains(err, "timeout") || strings.Contains(err, "deadline exceeded") {
			k = "timeout"
		} else if strings.Contains(err, "unexpected eof") || strings.Contains(err, "stream error") {
			k = "stream_broken"
		}
		return status, &k, text(res.Error)
	case res.Code != http.StatusOK:
		k := fmt.Sprintf("http_%d", res.Code)
		return status, &k, text(string(res.Body))
	case p.Stream && !strings.Contains(string(res.Body), doneLine):
		k := "stream_incomplete"
		return status, &k, text(fmt.Sprintf("the stream ended without %q after %d bytes", doneLine, len(res.Body)))
	case !p.Stream && !answered(res.Body):
		k := "empty_answer"
		return status, &k, text(string(res.Body))
	}
	return status, nil, nil
}

// answered: a JSON answer with at least one choice.
func answered(body []byte) bool {
	var answer struct {
		Choices []json.RawMessage `json:"choices"`
	}
	return json.Unmarshal(body, &answer) == nil && len(answer.Choices) > 0
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "load: %v\n", err)
		os.Exit(2)
	}
}

func run() error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	url := fs.String("url", "", "the gateway's URL, path included")
	file := fs.String("requests", "", "the plan: a JSON line a request")
	concurrency := fs.Int("concurrency", 32, "requests in flight at most, in all")
	timeout := fs.Duration("timeout", 30*time.Second, "each request's bound")
	maxTime := fs.Duration("max-duration", 120*time.Second, "no request is sent after this")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if *url == "" || *file == "" || *concurrency < 1 {
		return errors.New("give -url, -requests and a -concurrency of at least 1")
	}
	byProtocol, order, err := read(*file)
	if err != nil {
		return err
	}
	total := 0
	for _, plan := range byProtocol {
		total += len(plan)
	}
	lanes := make([]*lane, 0, len(order))
	for i, protocol := range order { // the in-flight requests shared out between the protocols
		workers := *concurrency / len(order)
		if i < *concurrency%len(order) {
			workers++
		}
		if workers < 1 {
			workers = 1
		}
		lanes = append(lanes, newLane(protocol, byProtocol[protocol], workers, *timeout))
	}

	out := json.NewEncoder(os.Stdout)
	var (
		mu      sync.Mutex
		stopped string
	)
	stopAll := func(why string) {
		mu.Lock()
		if stopped == "" {
			stopped = why
		}
		mu.Unlock()
		for _, l := range lanes {
			l.attacker.Stop()
		}
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		stopAll("halted by the caller")
	}()

	began := time.Now()
	var wg sync.WaitGroup
	var written sync.Mutex
	for _, l := range lanes {
		wg.Add(1)
		go func(l *lane) {
			defer wg.Done()
			for res := range l.attacker.Attack(l.targeter(*url), vegeta.ConstantPacer{}, *maxTime, "eppkit") {
				p := l.ids.of(res)
				if p == nil { // the end of the lane's targets (or a request that never left: none is planned)
					continue
				}
				status, kind, detail := judge(p, res)
				line := outcome{Index: p.Index, Status: status, Error: kind, Detail: detail,
					SentS: res.Timestamp.Sub(began).Seconds(), E2eMs: float64(res.Latency.Microseconds()) / 1000,
					Pod: res.Headers.Get(podKey)}
				written.Lock()
				_ = out.Encode(line)
				written.Unlock()
			}
		}(l)
	}
	wg.Wait()
	sent := 0
	for _, l := range lanes {
		l.ids.mu.Lock()
		sent += len(l.ids.bySeq)
		l.ids.mu.Unlock()
	}
	if stopped == "" && sent < total {
		stopped = fmt.Sprintf("max duration %s reached after %d of %d requests", *maxTime, sent, total)
	}
	return out.Encode(map[string]any{"done": true, "stopped": stopped})
}

// read the plan: each protocol's requests in order, and the protocols in the order they first appear.
func read(path string) (map[string][]*planned, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	byProtocol, order := map[string][]*planned{}, []string{}
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; scanner.Scan(); line++ {
		p := &planned{}
		if err := json.Unmarshal(scanner.Bytes(), p); err != nil {
			return nil, nil, fmt.Errorf("%s:%d: %v", path, line, err)
		}
		if _, seen := byProtocol[p.Protocol]; !seen {
			order = append(order, p.Protocol)
		}
		byProtocol[p.Protocol] = append(byProtocol[p.Protocol], p)
	}
	return byProtocol, order, scanner.Err()
}
