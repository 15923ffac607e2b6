"""The outputs: the audits' tables (`tables`), the Prometheus textfile (`textfile`), the lab's report
stamps and summary (`reports`).
"""
