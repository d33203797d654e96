"""Instruments only the course needs: probes, fault injection, lab-only views and
routes, and the raw WebSocket client. (Starting and stopping processes is the
project's toolkit, ``config.processes``.)"""
