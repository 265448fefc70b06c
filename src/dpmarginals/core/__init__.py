"""The nouns every step shares: the public domain and its labels, marginal tables, data
sets of records, errors, randomness sources and the privacy mark of a release."""
