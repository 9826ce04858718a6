"""The TUI's stylesheet, kept in Python so a wheel install needs no package data."""

CSS = """
Screen {
    layout: vertical;
}
TopBar {
    height: 1;
    dock: top;
}
KeyBar {
    height: 1;
    dock: bottom;
    background: $panel;
}
VerdictStrip {
    height: auto;
    max-height: 8;
    padding: 0 1;
    border-left: thick $secondary;
    background: $boost;
}
VerdictStrip.-firing { border-left: thick red; }
VerdictStrip.-warn { border-left: thick yellow; }
VerdictStrip.-ok { border-left: thick green; }
#panels {
    height: 1fr;
    layout: vertical;
    scrollbar-size-vertical: 1;
}
#panels.wide {
    layout: grid;
    grid-size: 2;
    grid-columns: 1fr 1fr;
    grid-rows: auto;
}
#panels.wide #panel-5 {
    column-span: 2;
}
.panel {
    height: auto;
    border: round $primary-darken-1;
    border-title-style: bold;
    padding: 0 1;
}
.panel.-firing { border: round red; border-subtitle-color: red; }
.panel.-warn { border: round yellow; border-subtitle-color: yellow; }
.panel.-ok { border-subtitle-color: green; }
#runbook-title, #topology-title {
    height: 1;
    dock: top;
    background: $primary;
    color: $text;
    text-style: bold;
}
#runbook-body, #topology-body {
    padding: 0 1;
}
#runbook-missing {
    color: $warning;
    text-style: bold;
    padding: 1 2;
}
HelpScreen {
    align: center middle;
}
#help-body {
    width: 96%;
    max-width: 100;
    height: auto;
    max-height: 96%;
    border: round $primary;
    background: $surface;
    padding: 0 1;
}
"""
