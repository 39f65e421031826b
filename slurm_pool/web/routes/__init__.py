"""The service's routes, one router per resource: who calls, the pool, jobs, acting on jobs, the console's page."""
