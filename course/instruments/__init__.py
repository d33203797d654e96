"""Instruments only the course needs: probes, fault injection, lab-only views and
routes, the raw WebSocket client and the process helpers of the live labs."""
