"""OpenMates: a self-hostable AI assistant platform."""
