"""The runbooks, one Markdown file per alert (runbooks/<AlertName>.md), shipped as package data."""
