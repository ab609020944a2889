package dev.streamjob.bench;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.apache.parquet.column.page.PageReadStore;
import org.apache.parquet.example.data.Group;
import org.apache.parquet.example.data.simple.convert.GroupRecordConverter;
import org.apache.parquet.hadoop.ParquetFileReader;
import org.apache.parquet.io.ColumnIOFactory;
import org.apache.parquet.io.LocalInputFile;
import org.apache.parquet.io.MessageColumnIO;
import org.apache.parquet.io.RecordReader;
import org.apache.parquet.schema.MessageType;
import org.apache.parquet.schema.PrimitiveType.PrimitiveTypeName;
import org.apache.parquet.schema.Type;

/**
 * Reads back the finished Parquet part files of an output directory (skips hidden files, i.e.
 * in-progress / pending ".part-*" files and "_" files) and computes the record count and the
 * per-column checksums that both engines must agree on:
 *
 * <ul>
 *   <li>INT64 column: wrapping sum of the values;
 *   <li>DOUBLE column: sum of Math.round(v * 1000) (i.e. the value in thousandths, rounded);
 *   <li>STRING column: sum of the UTF-8 byte lengths.
 * </ul>
 */
public final class ReadBack {
    private ReadBack() {}

    public static final class Result {
        public long files;
        public long records;
        public final Map<String, Long> columnSums = new LinkedHashMap<>();
    }

    public static List<Path> finishedFiles(Path dir) throws IOException {
        List<Path> out = new ArrayList<>();
        try (Stream<Path> s = Files.walk(dir)) {
            s.filter(Files::isRegularFile)
                    .filter(p -> {
                        String n = p.getFileName().toString();
                        return !n.startsWith(".") && !n.startsWith("_");
                    })
                    .sorted()
                    .forEach(out::add);
        }
        return out;
    }

    public static Result read(Path dir) throws IOException {
        Result res = new Result();
        for (Path f : finishedFiles(dir)) {
            res.files++;
            try (ParquetFileReader r = ParquetFileReader.open(new LocalInputFile(f))) {
                MessageType schema = r.getFooter().getFileMetaData().getSchema();
                List<Type> fields = schema.getFields();
                for (Type t : fields) {
                    res.columnSums.putIfAbsent(t.getName(), 0L);
                }
                MessageColumnIO io = new ColumnIOFactory().getColumnIO(schema);
                PageReadStore rg;
                while ((rg = r.readNextRowGroup()) != null) {
                    long rows = rg.getRowCount();
                    RecordReader<Group> rr = io.getRecordReader(rg, new GroupRecordConverter(schema));
                    long[] sums = new long[fields.size()];
                    for (long i = 0; i < rows; i++) {
                        Group g = rr.read();
                        for (int c = 0; c < fields.size(); c++) {
                            if (g.getFieldRepetitionCount(c) == 0) {
                                continue; // null
                            }
                            PrimitiveTypeName pt = fields.get(c).asPrimitiveType().getPrimitiveTypeName();
                            switch (pt) {
                                case INT64:
                                    sums[c] += g.getLong(c, 0);
                                    break;
                                case INT32:
                                    sums[c] += g.getInteger(c, 0);
                                    break;
                                case DOUBLE:
                                    sums[c] += Math.round(g.getDouble(c, 0) * 1000.0);
                                    break;
                                case FLOAT:
                                    sums[c] += Math.round(g.getFloat(c, 0) * 1000.0);
                                    break;
                                case BINARY:
                                    sums[c] += g.getBinary(c, 0).length();
                                    break;
                                default:
                                    break;
                            }
                        }
                    }
                    res.records += rows;
                    for (int c = 0; c < fields.size(); c++) {
                        res.columnSums.merge(fields.get(c).getName(), sums[c], Long::sum);
                    }
                }
            }
        }
        return res;
    }

    /** Stand-alone: java -cp jar dev.streamjob.bench.ReadBack DIR */
    public static void main(String[] args) throws IOException {
        Result r = read(Path.of(args[0]));
        System.out.println("files=" + r.files + " records=" + r.records + " columnSums=" + r.columnSums);
    }
}
