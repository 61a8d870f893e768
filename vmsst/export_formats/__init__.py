"""Export formats: SavedModel, sentence-transformers and Hugging Face."""
