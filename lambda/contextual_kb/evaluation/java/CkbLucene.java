import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.lucene.analysis.Analyzer;
import org.apache.lucene.analysis.TokenFilterFactory;
import org.apache.lucene.analysis.TokenStream;
import org.apache.lucene.analysis.custom.CustomAnalyzer;
import org.apache.lucene.analysis.tokenattributes.CharTermAttribute;
import org.apache.lucene.document.Document;
import org.apache.lucene.document.Field;
import org.apache.lucene.document.StoredField;
import org.apache.lucene.document.TextField;
import org.apache.lucene.index.DirectoryReader;
import org.apache.lucene.index.IndexWriter;
import org.apache.lucene.index.IndexWriterConfig;
import org.apache.lucene.search.IndexSearcher;
import org.apache.lucene.search.Query;
import org.apache.lucene.search.ScoreDoc;
import org.apache.lucene.search.similarities.BM25Similarity;
import org.apache.lucene.store.ByteBuffersDirectory;
import org.apache.lucene.util.ClasspathResourceLoader;
import org.apache.lucene.util.QueryBuilder;
import org.apache.lucene.util.ResourceLoader;
import org.apache.lucene.util.Version;

/**
 * The real Lucene analysis and BM25 for contextual_kb.evaluation.lucene (which writes the spec and the
 * inputs, and reads what this prints). Records are one a line, with backslash, newline and carriage
 * return escaped as \\, \n and \r.
 *
 *   CkbLucene version
 *   CkbLucene chain SPEC                        the factory class of each step, one a line
 *   CkbLucene analyze SPEC < records            each record's tokens, tab-separated, one line a record
 *   CkbLucene bm25 SPEC DOCS QUERIES K K1 B     each query's top K document numbers (0-based), a match
 *                                               query as OpenSearch builds it, BM25Similarity(K1, B)
 *
 * SPEC lines: "tokenizer NAME key=value...", "filter NAME key=value...", "words RESOURCE w1 w2..." (an
 * in-memory word list a filter names as a resource); NAME is Lucene's SPI name.
 */
public final class CkbLucene {
  private static final String FIELD = "text";
  private static final String NUMBER = "n";

  private static final class Words implements ResourceLoader {
    final Map<String, String> lists = new HashMap<>();
    final ResourceLoader classpath = new ClasspathResourceLoader(CkbLucene.class);

    @Override
    public InputStream openResource(String name) throws IOException {
      String words = lists.get(name);
      if (words == null) {
        throw new IOException("the spec defines no word list " + name);
      }
      return new ByteArrayInputStream(words.getBytes(StandardCharsets.UTF_8));
    }

    @Override
    public <T> Class<? extends T> findClass(String name, Class<T> expected) {
      return classpath.findClass(name, expected);
    }
  }

  static Analyzer analyzer(String spec) throws IOException {
    Words words = new Words();
    CustomAnalyzer.Builder builder = CustomAnalyzer.builder(words);
    List<String[]> chain = new ArrayList<>();
    for (String raw : Files.readAllLines(Paths.get(spec), StandardCharsets.UTF_8)) {
      String line = raw.strip();
      if (line.isEmpty() || line.startsWith("#")) {
        continue;
      }
      String[] parts = line.split("\\s+");
      if (parts[0].equals("words")) {
        words.lists.put(parts[1], String.join("\n", Arrays.copyOfRange(parts, 2, parts.length)) + "\n");
      } else {
        chain.add(parts);
      }
    }
    // Word lists first: a filter reads its list when the builder creates it.
    for (String[] parts : chain) {
      Map<String, String> params = new LinkedHashMap<>();
      for (String pair : Arrays.copyOfRange(parts, 2, parts.length)) {
        int eq = pair.indexOf('=');
        if (eq <= 0) {
          throw new IllegalArgumentException("expected key=value, got " + pair);
        }
        params.put(pair.substring(0, eq), pair.substring(eq + 1));
      }
      switch (parts[0]) {
        case "tokenizer" -> builder.withTokenizer(parts[1], params);
        case "filter" -> builder.addTokenFilter(parts[1], params);
        default -> throw new IllegalArgumentException("unknown spec line: " + parts[0]);
      }
    }
    return builder.build();
  }

  static String unescape(String line) {
    if (line.indexOf('\\') < 0) {
      return line;
    }
    StringBuilder out = new StringBuilder(line.length());
    for (int i = 0; i < line.length(); i++) {
      char c = line.charAt(i);
      if (c == '\\' && i + 1 < line.length()) {
        char next = line.charAt(++i);
        out.append(next == 'n' ? '\n' : next == 'r' ? '\r' : next);
      } else {
        out.append(c);
      }
    }
    return out.toString();
  }

  static List<String> records(BufferedReader in) throws IOException {
    List<String> out = new ArrayList<>();
    for (String line = in.readLine(); line != null; line = in.readLine()) {
      out.add(unescape(line));
    }
    return out;
  }

  static BufferedReader reader(String path) throws IOException {
    return Files.newBufferedReader(Paths.get(path), StandardCharsets.UTF_8);
  }

  static void analyze(Analyzer analyzer, PrintWriter out) throws IOException {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    for (String text : records(in)) {
      List<String> tokens = new ArrayList<>();
      try (TokenStream stream = analyzer.tokenStream(FIELD, text)) {
        CharTermAttribute term = stream.addAttribute(CharTermAttribute.class);
        stream.reset();
        while (stream.incrementToken()) {
          tokens.add(term.toString());
        }
        stream.end();
      }
      out.println(String.join("\t", tokens));
    }
  }

  static void bm25(Analyzer analyzer, String[] args, PrintWriter out) throws IOException {
    int k = Integer.parseInt(args[4]);
    BM25Similarity similarity = new BM25Similarity(Float.parseFloat(args[5]), Float.parseFloat(args[6]));
    ByteBuffersDirectory directory = new ByteBuffersDirectory();
    IndexWriterConfig config = new IndexWriterConfig(analyzer).setSimilarity(similarity);
    try (BufferedReader docs = reader(args[2]); IndexWriter writer = new IndexWriter(directory, config)) {
      int number = 0;
      for (String text : records(docs)) {
        Document doc = new Document();
        doc.add(new TextField(FIELD, text, Field.Store.NO));
        doc.add(new StoredField(NUMBER, number++));  // docIDs need not keep the order once segments merge
        writer.addDocument(doc);
      }
    }
    // OpenSearch's match query (operator OR) is Lucene's QueryBuilder, multi-term synonyms as phrases.
    QueryBuilder queries = new QueryBuilder(analyzer);
    queries.setAutoGenerateMultiTermSynonymsPhraseQuery(true);
    try (DirectoryReader index = DirectoryReader.open(directory); BufferedReader in = reader(args[3])) {
      IndexSearcher searcher = new IndexSearcher(index);
      searcher.setSimilarity(similarity);
      for (String text : records(in)) {
        Query query = queries.createBooleanQuery(FIELD, text);
        List<String> found = new ArrayList<>();
        if (query != null) {  // null: every word was a stop word
          for (ScoreDoc hit : searcher.search(query, k).scoreDocs) {
            found.add(searcher.storedFields().document(hit.doc).getField(NUMBER).numericValue().toString());
          }
        }
        out.println(String.join(" ", found));
      }
    }
  }

  public static void main(String[] args) throws Exception {
    String mode = args.length > 0 ? args[0] : "";
    try (PrintWriter out = new PrintWriter(new BufferedWriter(
        new OutputStreamWriter(System.out, StandardCharsets.UTF_8)))) {
      switch (mode) {
        case "version" -> out.println(Version.LATEST);
        case "chain" -> {
          try (Analyzer analyzer = analyzer(args[1])) {
            CustomAnalyzer custom = (CustomAnalyzer) analyzer;
            out.println(custom.getTokenizerFactory().getClass().getName());
            for (TokenFilterFactory factory : custom.getTokenFilterFactories()) {
              out.println(factory.getClass().getName());
            }
          }
        }
        case "analyze" -> {
          try (Analyzer analyzer = analyzer(args[1])) {
            analyze(analyzer, out);
          }
        }
        case "bm25" -> {
          try (Analyzer analyzer = analyzer(args[1])) {
            bm25(analyzer, args, out);
          }
        }
        default -> {
          System.err.println("usage: CkbLucene version | chain SPEC | analyze SPEC | bm25 SPEC DOCS QUERIES K K1 B");
          System.exit(2);
        }
      }
    }
  }
}
