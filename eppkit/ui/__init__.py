"""The live trace UI: Zipkin's server and its Lens UI, fed with every trace a Jaeger receives."""
