// The floor of an integration style: a picker that costs nothing, speaking the transport Envoy uses to ask it.
// eppkit compare runs each picker mode once more with this in the picker's place (eppkit/compare/floors.py), so a
// mode's cost splits into what its transport costs on this machine and what its picker adds.
//
//	floor -transport extproc -port P -pick host:port[,host:port...] [-body streamed|buffered|none]
//	      [-decide headers|body] [-frontend]
//	    an ext_proc server that answers every message at once, in the order Envoy asks, and picks the fixed list
//	    (header, envoy.lb metadata and a route refresh), as Envoy's request_body_mode lets it: streamed
//	    (FULL_DUPLEX_STREAMED) on the request headers, every body chunk echoed as a streamed mutation with its own
//	    end_of_stream; buffered (BUFFERED) on the one body message, the headers answered empty first; none (NONE)
//	    on the request headers. With -decide body (streamed) it decides where an EPP that reads the model from
//	    the body does: the headers reply waits for the body's end, then goes with the body (as one streamed
//	    mutation), as the kit's EPP and GAIE's do. With -frontend it asks a frontend floor for each decision, as
//	    the sidecar's EPP asks its frontend: a child process of its own (-transport frontend), one POST of the
//	    body over a keep-alive loopback connection
//	floor -transport frontend -port P -pick host:port[,host:port...]
//	    the sidecar frontend's routing query (any POST with x-routing-request: true): the body read, the list
//	    answered at once ({"endpoint": first, "fallbacks": [rest]}); GET /health. Port 0: any free one, said on
//	    stdout ("listening on 127.0.0.1:P")
//	floor -transport callout -port P -pick host:port[,host:port...]
//	    the callout service's POST /pick (the Lua filter's and the dynamic module's): the body read, the list
//	    answered at once ({"endpoint": first, "fallbacks": [rest]} and the destination header); GET /health
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/structpb"
)

const (
	destination    = "x-gateway-destination-endpoint"
	routingRequest = "x-routing-request"
)

type noop struct {
	pb.UnimplementedExternalProcessorServer
	pick       string
	metadata   *structpb.Struct
	buffered   bool   // Envoy sends the body whole (BUFFERED): the decision answers it
	onBodyEnd  bool   // -decide body: the headers reply waits for the body's end
	frontend   string // -frontend: the frontend floor's URL, asked for every decision
	httpClient *http.Client
}

// ask is the sidecar's hop: the body to the frontend floor and its answer read, as the sidecar's EPP does.
func (n *noop) ask(body []byte) error {
	if n.frontend == "" {
		return nil
	}
	req, err := http.NewRequest(http.MethodPost, n.frontend+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set(routingRequest, "true")
	resp, err := n.httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var answer struct{ Endpoint string }
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil || answer.Endpoint == "" {
		return fmt.Errorf("frontend floor: no endpoint in its answer (%v)", err)
	}
	return nil
}

func (n *noop) common() *pb.CommonResponse {
	mutation := &pb.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{
		Header:       &corev3.HeaderValue{Key: destination, RawValue: []byte(n.pick)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}}}
	return &pb.CommonResponse{ClearRouteCache: true, HeaderMutation: mutation}
}

func (n *noop) onHeaders() *pb.ProcessingResponse {
	if n.buffered {
		return &pb.ProcessingResponse{Response: &pb.ProcessingResponse_RequestHeaders{RequestHeaders: &pb.HeadersResponse{}}}
	}
	return &pb.ProcessingResponse{
		Response:        &pb.ProcessingResponse_RequestHeaders{RequestHeaders: &pb.HeadersResponse{Response: n.common()}},
		DynamicMetadata: n.metadata}
}

func (n *noop) onBody(body *pb.HttpBody) *pb.ProcessingResponse {
	if n.buffered {
		return &pb.ProcessingResponse{
			Response:        &pb.ProcessingResponse_RequestBody{RequestBody: &pb.BodyResponse{Response: n.common()}},
			DynamicMetadata: n.metadata}
	}
	return &pb.ProcessingResponse{Response: &pb.ProcessingResponse_RequestBody{RequestBody: echo(body)}}
}

func echo(body *pb.HttpBody) *pb.BodyResponse {
	return &pb.BodyResponse{Response: &pb.CommonResponse{BodyMutation: &pb.BodyMutation{
		Mutation: &pb.BodyMutation_StreamedResponse{StreamedResponse: &pb.StreamedBodyResponse{
			Body: body.Body, EndOfStream: body.EndOfStream}}}}}
}

// release sends the held headers reply and the held body (-decide body), once the decision is made.
func (n *noop) release(stream pb.ExternalProcessor_ProcessServer, body []byte, endOfStream bool) error {
	if err := n.ask(body); err != nil {
		return err
	}
	if err := stream.Send(n.onHeaders()); err != nil {
		return err
	}
	return stream.Send(&pb.ProcessingResponse{Response: &pb.ProcessingResponse_RequestBody{
		RequestBody: echo(&pb.HttpBody{Body: body, EndOfStream: endOfStream})}})
}

func (n *noop) Process(stream pb.ExternalProcessor_ProcessServer) error {
	held := false // -decide body: the headers seen, their reply waiting for the body's end
	var body []byte
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		var out *pb.ProcessingResponse
		switch r := req.Request.(type) {
		case *pb.ProcessingRequest_RequestHeaders:
			if n.onBodyEnd && !r.RequestHeaders.EndOfStream {
				held = true
				continue
			}
			if err := n.ask(nil); err != nil {
				return err
			}
			out = n.onHeaders()
		case *pb.ProcessingRequest_RequestBody:
			if held {
				body = append(body, r.RequestBody.Body...)
				if !r.RequestBody.EndOfStream {
					continue
				}
				held = false
				if err := n.release(stream, body, true); err != nil {
					return err
				}
				continue
			}
			if n.buffered {
				if err := n.ask(r.RequestBody.Body); err != nil {
					return err
				}
			}
			out = n.onBody(r.RequestBody)
		case *pb.ProcessingRequest_RequestTrailers:
			if held { // the body ended without end_of_stream: trailers follow it
				held = false
				if err := n.release(stream, body, false); err != nil {
					return err
				}
			}
			out = &pb.ProcessingResponse{Response: &pb.ProcessingResponse_RequestTrailers{RequestTrailers: &pb.TrailersResponse{}}}
		case *pb.ProcessingRequest_ResponseHeaders:
			out = &pb.ProcessingResponse{Response: &pb.ProcessingResponse_ResponseHeaders{ResponseHeaders: &pb.HeadersResponse{}}}
		case *pb.ProcessingRequest_ResponseBody:
			out = &pb.ProcessingResponse{Response: &pb.ProcessingResponse_ResponseBody{ResponseBody: echo(r.ResponseBody)}}
		case *pb.ProcessingRequest_ResponseTrailers:
			out = &pb.ProcessingResponse{Response: &pb.ProcessingResponse_ResponseTrailers{ResponseTrailers: &pb.TrailersResponse{}}}
		}
		if err := stream.Send(out); err != nil {
			return err
		}
	}
}

// pickServer is what the HTTP floors share: the fixed pick as the callout service's JSON answer, and a mux that
// answers GET /health.
func pickServer(pick string) ([]byte, *http.ServeMux) {
	endpoints := strings.Split(pick, ",")
	answer, err := json.Marshal(map[string]any{"endpoint": endpoints[0], "fallbacks": endpoints[1:],
		"scorer": "floor", "reason": "floor"})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "application/json")
		io.WriteString(w, `{"status":"ok"}`)
	})
	return answer, mux
}

// callout answers the callout filters' POST /pick at once.
func callout(pick string) http.Handler {
	answer, mux := pickServer(pick)
	mux.HandleFunc("POST /pick", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // the whole body, as a picker that reads it would
		w.Header().Set("content-type", "application/json")
		w.Header().Set(destination, pick)
		w.Write(answer)
	})
	return mux
}

// frontendFloor answers the sidecar's routing query at once: any POST with x-routing-request: true.
func frontendFloor(pick string) http.Handler {
	answer, mux := pickServer(pick)
	mux.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("content-type", "application/json")
		if r.Header.Get(routingRequest) != "true" {
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":{"message":"a routing query needs x-routing-request: true"}}`)
			return
		}
		w.Write(answer)
	})
	return mux
}

// startFrontend runs this program as the frontend floor, a child that dies with it; its URL.
func startFrontend(pick string) string {
	self, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	child := exec.Command(self, "-transport", "frontend", "-port", "0", "-pick", pick)
	child.Stderr = os.Stderr
	child.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := child.StdoutPipe()
	if err != nil {
		log.Fatal(err)
	}
	if err := child.Start(); err != nil {
		log.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	address, found := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !found {
		log.Fatalf("frontend floor: no address on its stdout (%q, %v)", line, err)
	}
	return "http://" + address
}

func main() {
	transport := flag.String("transport", "extproc", "extproc | callout | frontend")
	port := flag.String("port", "9002", "the port to listen on (127.0.0.1)")
	pick := flag.String("pick", "", "the destination every request gets: host:port[,host:port...]")
	body := flag.String("body", "streamed", "extproc: how Envoy sends the request body: streamed | buffered | none")
	decide := flag.String("decide", "headers", "extproc, streamed: decide on the request headers, or at the body's end")
	frontend := flag.Bool("frontend", false, "extproc: ask a frontend floor (a child process) for every decision")
	flag.Parse()
	listener, err := net.Listen("tcp", "127.0.0.1:"+*port)
	if err != nil {
		log.Fatal(err)
	}
	switch *transport {
	case "callout":
		log.Printf("floor (callout) on 127.0.0.1:%s, picking %s", *port, *pick)
		log.Fatal(http.Serve(listener, callout(*pick)))
	case "frontend":
		fmt.Printf("listening on %s\n", listener.Addr())
		log.Fatal(http.Serve(listener, frontendFloor(*pick)))
	case "extproc":
		metadata, err := structpb.NewStruct(map[string]any{"envoy.lb": map[string]any{destination: *pick}})
		if err != nil {
			log.Fatal(err)
		}
		if *body != "streamed" && *body != "buffered" && *body != "none" {
			log.Fatalf("-body %q: streamed, buffered or none", *body)
		}
		if *decide != "headers" && *decide != "body" {
			log.Fatalf("-decide %q: headers or body", *decide)
		}
		floor := &noop{pick: *pick, metadata: metadata, buffered: *body == "buffered",
			onBodyEnd: *decide == "body" && *body == "streamed"}
		if *frontend {
			floor.frontend = startFrontend(*pick)
			floor.httpClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
		}
		server := grpc.NewServer(grpc.MaxRecvMsgSize(80<<20), grpc.MaxSendMsgSize(80<<20))
		pb.RegisterExternalProcessorServer(server, floor)
		healthpb.RegisterHealthServer(server, health.NewServer()) // "" SERVING
		log.Printf("floor (extproc, request body %s, deciding on the %s, frontend %q) on 127.0.0.1:%s, picking %s",
			*body, *decide, floor.frontend, *port, *pick)
		log.Fatal(server.Serve(listener))
	default:
		log.Fatalf("-transport %q: extproc, callout or frontend", *transport)
	}
}
