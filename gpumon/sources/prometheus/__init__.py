"""A cluster read from Prometheus' HTTP query API: one node per scrape target.

May import: :mod:`gpumon.data`; the standard library's HTTP client. Never pynvml or psutil.
"""
