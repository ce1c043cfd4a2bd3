"""HTTP routers: the JSON API under /api/v1, the page, and the health check."""
