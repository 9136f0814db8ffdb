"""The CMSWEB service face: JSON API, operator pages, metrics and the authenticated trigger."""
