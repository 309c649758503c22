"""Token trees: their shape (`StaticTree`), their place in one target call (`layout`) and their exact acceptance
(`rejection`)."""
