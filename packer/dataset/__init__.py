"""Operations on a complete packed dataset: verify it, describe it, fetch it from a URL."""
