"""The smallest ext_proc server for the repro: FULL_DUPLEX_STREAMED, everything echoed at once.

Request headers: an empty headers reply. Each body chunk: sent back as a streamed_response with the
end_of_stream it came with. Trailers: an empty trailers reply. Usage: python ext_proc_echo.py 9002
"""
import asyncio
import sys

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc


class Echo(pb_grpc.ExternalProcessorServicer):
    async def Process(self, requests, context):  # noqa: N802
        async for request in requests:
            kind = request.WhichOneof("request")
            reply = pb.ProcessingResponse()
            if kind == "request_headers":
                reply.request_headers.SetInParent()
            elif kind == "request_body":
                streamed = reply.request_body.response.body_mutation.streamed_response
                streamed.body = request.request_body.body
                streamed.end_of_stream = request.request_body.end_of_stream
            elif kind == "request_trailers":
                reply.request_trailers.SetInParent()
            else:
                continue
            print(f"ext_proc: {kind} in, reply out", flush=True)
            yield reply


async def main(port: int) -> None:
    server = grpc.aio.server()
    pb_grpc.add_ExternalProcessorServicer_to_server(Echo(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
