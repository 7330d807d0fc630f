"""The staff Usage page: cost and tokens of runs over a period, charted, tabled and exported."""
