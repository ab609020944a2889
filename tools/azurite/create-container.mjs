// Creates a blob container (tests only): node create-container.mjs <connection string> <container>
// Uses the official SDK, so no request signing is written here. An existing container is fine.
import { BlobServiceClient } from "@azure/storage-blob";

const [connectionString, container] = process.argv.slice(2);
if (!connectionString || !container) {
  console.error("usage: node create-container.mjs <connection string> <container>");
  process.exit(2);
}
const service = BlobServiceClient.fromConnectionString(connectionString);
await service.getContainerClient(container).createIfNotExists();
