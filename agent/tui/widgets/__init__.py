"""The TUI's widgets: top bar, verdict strip, key bar and the five panels."""
