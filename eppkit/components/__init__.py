"""The components a testbed is made of, as objects: a managed process or container in a ``with``, readiness
strategies, launchers (a process of this host or a container), free ports, and Jaeger."""
