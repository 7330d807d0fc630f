"""The browser edge: HTTP pages and WebSocket consumers; HTML out, validated frames in."""
