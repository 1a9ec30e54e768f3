"""The service's runtime: app wiring, the command line, configuration, the job queue
and its handlers, logs and periodic upkeep."""
