"""The web server: app factory, settings, executor, errors, limits, middleware, caches.

Also the transport (JSON and base64 arrays), presets, request/response schemas and
routers. It imports the engine (:mod:`attnviz.attention`) and the pretrained models
(:mod:`attnviz.pretrained`); neither imports it.
"""
