"""Real-time outputs: DBLog's interleaved stream of log events and dump rows, to NATS JetStream or a webhook."""
