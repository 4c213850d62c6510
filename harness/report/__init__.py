"""From a result file to report.md and report.html (charts, labels), and the generated docs."""
