"""``specdesk bench``: measured speed-ups against plain decoding and Hugging Face, with the theory beside them."""
