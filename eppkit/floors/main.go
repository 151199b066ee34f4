// The floor of an integration style: a picker that costs nothing, speaking the transport Envoy uses to ask it.
// eppkit compare runs each picker mode once more with this in the picker's place (eppkit/compare/floors.py), so a
// mode's cost splits into what its transport costs on this machine and what its picker adds.
//
//	floor -transport extproc -port P -pick host:port[,host:port...] [-body streamed|buffered|none]
//	    an ext_proc server that answers every message at once, in the order Envoy asks, and picks the fixed list
//	    (header, envoy.lb metadata and a route refresh), as Envoy's request_body_mode lets it: streamed
//	    (FULL_DUPLEX_STREAMED) on the request headers, every body chunk echoed as a streamed mutation with its own
//	    end_of_stream; buffered (BUFFERED) on the one body message, the headers answered empty first; none (NONE)
//	    on the request headers
//	floor -transport callout -port P -pick host:port[,host:port...]
//	    the callout service's POST /pick (the Lua filter's and the dynamic module's): the body read, the list
//	    answered at once ({"endpoint": first, "fallbacks": [rest]} and the destination header); GET /health
package main

import (
	"encoding/json"
	"flag"
	"io"
	"log"
	"net"
	"net/http"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/structpb"
)

const destination = "x-gateway-destination-endpoint"

type noop struct {
	pb.UnimplementedExternalProcessorServer
	pick     string
	metadata *structpb.Struct
	buffered bool // Envoy sends the body whole (BUFFERED): the decision answers it
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

func (n *noop) Process(stream pb.ExternalProcessor_ProcessServer) error {
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
			out = n.onHeaders()
		case *pb.ProcessingRequest_RequestBody:
			out = n.onBody(r.RequestBody)
		case *pb.ProcessingRequest_RequestTrailers:
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

// callout answers the callout filters' POST /pick at once.
func callout(pick string) http.Handler {
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
	mux.HandleFunc("POST /pick", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // the whole body, as a picker that reads it would
		w.Header().Set("content-type", "application/json")
		w.Header().Set(destination, pick)
		w.Write(answer)
	})
	return mux
}

func main() {
	transport := flag.String("transport", "extproc", "extproc | callout")
	port := flag.String("port", "9002", "the port to listen on (127.0.0.1)")
	pick := flag.String("pick", "", "the destination every request gets: host:port[,host:port...]")
	body := flag.String("body", "streamed", "extproc: how Envoy sends the request body: streamed | buffered | none")
	flag.Parse()
	listener, err := net.Listen("tcp", "127.0.0.1:"+*port)
	if err != nil {
		log.Fatal(err)
	}
	switch *transport {
	case "callout":
		log.Printf("floor (callout) on 127.0.0.1:%s, picking %s", *port, *pick)
		log.Fatal(http.Serve(listener, callout(*pick)))
	case "extproc":
		metadata, err := structpb.NewStruct(map[string]any{"envoy.lb": map[string]any{destination: *pick}})
		if err != nil {
			log.Fatal(err)
		}
		if *body != "streamed" && *body != "buffered" && *body != "none" {
			log.Fatalf("-body %q: streamed, buffered or none", *body)
		}
		server := grpc.NewServer(grpc.MaxRecvMsgSize(80<<20), grpc.MaxSendMsgSize(80<<20))
		pb.RegisterExternalProcessorServer(server, &noop{pick: *pick, metadata: metadata, buffered: *body == "buffered"})
		healthpb.RegisterHealthServer(server, health.NewServer()) // "" SERVING
		log.Printf("floor (extproc, request body %s) on 127.0.0.1:%s, picking %s", *body, *port, *pick)
		log.Fatal(server.Serve(listener))
	default:
		log.Fatalf("-transport %q: extproc or callout", *transport)
	}
}
