"""The CDK app's constructs: storage, vector store, knowledge base, transformation function, monitoring."""
