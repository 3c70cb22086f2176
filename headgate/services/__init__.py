"""The service layer's own modules: the producer clients, configuration, the duties and
the scheduler, the live change feed, forecasts and the server's process wiring. The worker
runtime (headgate.worker) and the task layer (headgate.tasks) are services too, in
packages of their own because users import from them by name."""
