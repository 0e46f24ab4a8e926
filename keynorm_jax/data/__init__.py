"""Text in and windows out: the byte tokenizer, the corpora (the KJV TFDS builder and others), the
Grain training stream and the evaluation windows."""
